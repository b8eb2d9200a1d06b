// The chat templates `zero data prepare` renders natively: the common families, recognised
// from tokenizer_config.json's chat_template by their markers (no Jinja engine). Rendering equals
// transformers' apply_chat_template for the families' published templates, with and without
// add_generation_prompt (tests/fixtures/chat_templates). Any other template is an error that
// names it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace zero::text {

class Tokenizer;

// kGemma: Gemma 1 / 2 (a system turn refused); kGemma3: Gemma 3 (the system turn folded into the
// first user turn); kPhi3: Phi-3 / Phi-3.5 (turns end with <|end|>, a conversation with eos_token).
enum class ChatFamily : uint8_t { kChatMl, kLlama3, kMistral, kZephyr, kGemma, kGemma3, kPhi3 };

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

// A piece of the rendered conversation: assistant replies (and their end-of-turn marker) are
// trained on, everything else is not.
struct ChatSegment {
  std::string text;
  bool trained = false;
};

class ChatTemplate {
 public:
  // Recognises `chat_template` (tokenizer_config.json's, named by `source` in errors): ChatML
  // (<|im_start|>), Llama-3 (<|start_header_id|>), Mistral / Llama-2 ([INST]), Gemma
  // (<start_of_turn>; Gemma 3's by its first_user_prefix), Phi-3 (<|user|> ... <|end|>), Zephyr
  // (<|user|>).
  // `bos_token` / `eos_token` are the texts the template's bos_token / eos_token stand for.
  static StatusOr<ChatTemplate> recognise(const std::optional<std::string>& chat_template,
                                          std::string bos_token, std::string eos_token,
                                          const std::string& source);
  // The template of `tok`'s tokenizer_config.json, with the texts of its bos/eos tokens; errors
  // name that file (or its expected path when there was none) and what it holds instead.
  static StatusOr<ChatTemplate> for_tokenizer(const Tokenizer& tok);
  ChatTemplate(ChatFamily family, std::string bos_token, std::string eos_token,
               bool skip_empty_system = false)
      : family_(family),
        bos_(std::move(bos_token)),
        eos_(std::move(eos_token)),
        skip_empty_system_(skip_empty_system) {}

  ChatFamily family() const { return family_; }
  // The conversation's segments, concatenated = the template's text with add_generation_prompt as
  // given (true: the generation prompt is the last segment, untrained). Errors: an unknown role,
  // and where the template raises: a system message (Mistral, Gemma 1/2), roles that do not
  // alternate user/assistant (Mistral, Gemma).
  StatusOr<std::vector<ChatSegment>> render(const std::vector<ChatMessage>& messages,
                                            bool add_generation_prompt = false) const;
  // What apply_chat_template(add_generation_prompt=True) appends after the conversation: the
  // header of the assistant's turn ("" for Mistral, whose " [/INST]" already ends the prompt).
  std::string generation_prompt() const;
  // The token that ends an assistant turn when it is not EOS: ChatML <|im_end|>, Llama-3
  // <|eot_id|>, Gemma <end_of_turn>, Phi-3 <|end|>; nullopt for the families whose turns end with
  // eos_token (Mistral, Zephyr).
  std::optional<std::string> end_of_turn_token() const;

 private:
  ChatFamily family_;
  std::string bos_, eos_;
  bool skip_empty_system_ = false;  // Phi-3.5: a system turn with empty content renders nothing
};

const char* chat_family_name(ChatFamily family);

}  // namespace zero::text
