// Native renderers of the ChatML, Llama-3, Mistral [INST], Zephyr, Gemma and Phi-3 chat templates.
#include "text/chat_template.h"

#include <filesystem>

#include "text/tokenizer.h"
#include "text/utf8.h"

namespace zero::text {

namespace {

// Jinja's `trim` (Python str.strip): leading and trailing whitespace code points.
bool is_py_space(char32_t cp) { return is_unicode_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F); }

std::string py_strip(const std::string& s) {
  size_t begin = 0, end = s.size();
  while (begin < end) {
    const size_t n = utf8_sequence_bytes(s, begin);
    if (n == 0 || !is_py_space(decode_utf8_at(s, begin, n))) break;
    begin += n;
  }
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    const size_t n = utf8_sequence_bytes(s, start);
    if (n == 0 || start + n != end || !is_py_space(decode_utf8_at(s, start, n))) break;
    end = start;
  }
  return s.substr(begin, end - begin);
}

}  // namespace

const char* chat_family_name(ChatFamily family) {
  switch (family) {
    case ChatFamily::kChatMl: return "ChatML";
    case ChatFamily::kLlama3: return "Llama-3";
    case ChatFamily::kMistral: return "Mistral [INST]";
    case ChatFamily::kZephyr: return "Zephyr";
    case ChatFamily::kGemma: return "Gemma";
    case ChatFamily::kGemma3: return "Gemma 3";
    case ChatFamily::kPhi3: return "Phi-3";
  }
  return "?";
}

StatusOr<ChatTemplate> ChatTemplate::recognise(const std::optional<std::string>& chat_template,
                                               std::string bos_token, std::string eos_token,
                                               const std::string& source) {
  if (!chat_template) {
    return invalid_argument(
        "{}: no chat_template, so a conversation cannot be rendered with the model's template",
        source);
  }
  const std::string& t = *chat_template;
  auto has = [&](const char* marker) { return t.find(marker) != std::string::npos; };
  ChatFamily family;
  if (has("<|im_start|>")) {
    family = ChatFamily::kChatMl;
  } else if (has("<|start_header_id|>")) {
    family = ChatFamily::kLlama3;
  } else if (has("[INST]")) {
    family = ChatFamily::kMistral;
  } else if (has("<start_of_turn>")) {
    family = has("first_user_prefix") ? ChatFamily::kGemma3 : ChatFamily::kGemma;
  } else if (has("<|user|>") && has("<|assistant|>") && has("<|end|>")) {
    family = ChatFamily::kPhi3;
  } else if (has("<|user|>") && has("<|assistant|>")) {
    family = ChatFamily::kZephyr;
  } else {
    return unimplemented(
        "{}: chat_template is none of ChatML, Llama-3, Mistral [INST], Gemma, Phi-3 or Zephyr (it "
        "begins "
        "\"{}\"); no Jinja engine is guessed at: render the conversations to \"text\" or "
        "\"prompt\" + \"completion\" instead",
        source, t.substr(0, 60));
  }
  // Variants that add text of their own (a default system prompt, tool calls) would render
  // differently from this renderer: refused rather than silently different.
  if (has("tools") || has("You are")) {
    return unimplemented(
        "{}: this {} chat_template has parts the native renderer does not reproduce (tools or a "
        "default system prompt); render the conversations to \"text\" or \"prompt\" + "
        "\"completion\" instead",
        source, chat_family_name(family));
  }
  // The [INST] family has variants that render differently: Llama-2's (<<SYS>>, BOS and stripped
  // content per turn) and newer Mistral ones with no space before [/INST].
  if (family == ChatFamily::kMistral &&
      (has("<<SYS>>") || has("strip()") || !(has("' [/INST]'") || has("\" [/INST]\"")))) {
    return unimplemented(
        "{}: this [INST] chat_template is not the Mistral-Instruct one (\"[INST] \" + content + "
        "\" [/INST]\"); Llama-2 <<SYS>> and other variants are not rendered natively: render the "
        "conversations to \"text\" or \"prompt\" + \"completion\" instead",
        source);
  }
  // Phi-3's: system / user / assistant turns each "<|role|>\n" + content + "<|end|>\n", and
  // eos_token after a conversation without the generation prompt. The first Phi-3-mini template
  // (BOS, the assistant header inside the user turn) renders differently: refused.
  if (family == ChatFamily::kPhi3 &&
      (has("bos_token") || !has("'<|system|>\\n'") || !has("{{ eos_token }}"))) {
    return unimplemented(
        "{}: this <|end|> chat_template is not Phi-3's (\"<|role|>\\n\" + content + \"<|end|>\\n\" "
        "per turn, eos_token at the end); render the conversations to \"text\" or \"prompt\" + "
        "\"completion\" instead",
        source);
  }
  const bool skip_empty_system = family == ChatFamily::kPhi3 && has("== 'system' and message");
  return ChatTemplate(family, std::move(bos_token), std::move(eos_token), skip_empty_system);
}

StatusOr<ChatTemplate> ChatTemplate::for_tokenizer(const Tokenizer& tok) {
  if (tok.config_source().empty()) {
    return invalid_argument(
        "{}: not found, so the tokenizer has no chat_template to render a conversation with",
        (std::filesystem::path(tok.source()).parent_path() / "tokenizer_config.json").string());
  }
  auto token_text = [&](std::optional<int32_t> id) {
    return id ? tok.id_to_token(*id).value_or("") : std::string();
  };
  return recognise(tok.chat_template(), token_text(tok.bos_id()), token_text(tok.eos_id()),
                   tok.config_source());
}

std::string ChatTemplate::generation_prompt() const {
  switch (family_) {
    case ChatFamily::kChatMl: return "<|im_start|>assistant\n";
    case ChatFamily::kLlama3: return "<|start_header_id|>assistant<|end_header_id|>\n\n";
    case ChatFamily::kMistral: return "";
    case ChatFamily::kZephyr: return "<|assistant|>\n";
    case ChatFamily::kGemma:
    case ChatFamily::kGemma3: return "<start_of_turn>model\n";
    case ChatFamily::kPhi3: return "<|assistant|>\n";
  }
  return "";
}

std::optional<std::string> ChatTemplate::end_of_turn_token() const {
  switch (family_) {
    case ChatFamily::kChatMl: return "<|im_end|>";
    case ChatFamily::kLlama3: return "<|eot_id|>";
    case ChatFamily::kGemma:
    case ChatFamily::kGemma3: return "<end_of_turn>";
    case ChatFamily::kPhi3: return "<|end|>";
    case ChatFamily::kMistral:
    case ChatFamily::kZephyr: return std::nullopt;
  }
  return std::nullopt;
}

StatusOr<std::vector<ChatSegment>> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                                        bool add_generation_prompt) const {
  std::vector<ChatSegment> out;
  auto add = [&](std::string text, bool trained) {
    if (!text.empty()) out.push_back({std::move(text), trained});
  };
  // Gemma 3 folds a leading system turn into the first user turn; the turns after it alternate.
  std::string first_user_prefix;
  size_t first_turn = 0;
  if (family_ == ChatFamily::kGemma3 && !messages.empty() && messages[0].role == "system") {
    first_user_prefix = messages[0].content + "\n\n";
    first_turn = 1;
  }
  if (family_ == ChatFamily::kGemma || family_ == ChatFamily::kGemma3) add(bos_, false);
  for (size_t i = first_turn; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      return invalid_argument("message {}: unknown role \"{}\" (system, user or assistant)", i,
                              m.role);
    }
    const bool reply = m.role == "assistant";
    if (family_ == ChatFamily::kGemma || family_ == ChatFamily::kGemma3) {
      if (m.role == "system") {
        return invalid_argument(
            "message {}: the {} template supports a system turn only {}", i,
            chat_family_name(family_),
            family_ == ChatFamily::kGemma ? "not at all (System role not supported)" : "first");
      }
      if ((m.role == "user") != ((i - first_turn) % 2 == 0)) {
        return invalid_argument(
            "message {}: the {} template needs roles alternating user/assistant/user/...", i,
            chat_family_name(family_));
      }
      add("<start_of_turn>" + std::string(reply ? "model" : m.role) + "\n" +
              (i == first_turn ? first_user_prefix : std::string()),
          false);
      add(py_strip(m.content) + "<end_of_turn>", reply);
      add("\n", false);
      continue;
    }
    switch (family_) {
      case ChatFamily::kChatMl:
        add("<|im_start|>" + m.role + "\n", false);
        add(m.content + "<|im_end|>", reply);
        add("\n", false);
        break;
      case ChatFamily::kLlama3:
        add((i == 0 ? bos_ : "") + "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n", false);
        add(py_strip(m.content) + "<|eot_id|>", reply);
        break;
      case ChatFamily::kMistral:
        if (m.role == "system") {
          return invalid_argument(
              "message {}: the Mistral template supports only user and "
              "assistant roles",
              i);
        }
        if ((m.role == "user") != (i % 2 == 0)) {
          return invalid_argument(
              "message {}: the Mistral template needs roles alternating "
              "user/assistant/user/...",
              i);
        }
        if (i == 0) add(bos_, false);
        if (reply) {
          add(m.content + eos_, true);
        } else {
          add("[INST] " + m.content + " [/INST]", false);
        }
        break;
      case ChatFamily::kZephyr:
        add("<|" + m.role + "|>\n", false);
        add(m.content + eos_, reply);
        add("\n", false);
        break;
      case ChatFamily::kPhi3:
        if (m.role == "system" && m.content.empty() && skip_empty_system_) break;
        add("<|" + m.role + "|>\n", false);
        add(m.content + "<|end|>", reply);
        add("\n", false);
        break;
      case ChatFamily::kGemma:
      case ChatFamily::kGemma3: break;  // above
    }
  }
  if (add_generation_prompt) {
    add(generation_prompt(), false);
  } else if (family_ == ChatFamily::kPhi3) {
    add(eos_, false);  // the template's {% else %}{{ eos_token }}
  }
  return out;
}

}  // namespace zero::text
