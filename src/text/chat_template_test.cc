// The native chat-template renderers against jinja2 renderings of the families' published
// templates (tests/fixtures/chat_templates/make_chat_fixtures.py, as apply_chat_template, with
// and without add_generation_prompt), the trained segments (assistant replies and their
// end-of-turn marker), the end-of-turn tokens, and the refusals.
#include "text/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "text/tokenizer.h"

namespace zero::text {
namespace {

nlohmann::json fixtures() {
  std::ifstream in(std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/chat_templates/expected.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

// The fixture's template of `family`, recognised as tokenizer_config.json's would be.
StatusOr<ChatTemplate> fixture_template(const nlohmann::json& f, const std::string& family) {
  return ChatTemplate::recognise(f["templates"][family].get<std::string>(), "<s>", "</s>",
                                 "tokenizer_config.json");
}

std::vector<ChatMessage> fixture_messages(const nlohmann::json& c) {
  std::vector<ChatMessage> messages;
  for (const auto& m : c["messages"]) messages.push_back({m["role"], m["content"]});
  return messages;
}

TEST(ChatTemplate, RendersAsTransformers) {
  const nlohmann::json f = fixtures();
  ASSERT_GE(f["cases"].size(), 7u);
  for (const auto& c : f["cases"]) {
    const std::string family = c["family"];
    auto t = fixture_template(f, family);
    ASSERT_TRUE(t.ok()) << family << ": " << t.status().to_string();
    const std::vector<ChatMessage> messages = fixture_messages(c);
    auto segments = t->render(messages);
    ASSERT_TRUE(segments.ok()) << family << ": " << segments.status().to_string();
    std::string text, trained;
    for (const ChatSegment& s : *segments) {
      text += s.text;
      if (s.trained) trained += s.text;
    }
    EXPECT_EQ(text, c["text"].get<std::string>()) << family;
    // Every reply is trained on, nothing of the user's or system's is.
    for (const ChatMessage& m : messages) {
      // (Llama-3's template trims the content.)
      if (m.content.find_first_not_of(" \n") == std::string::npos) continue;  // empty
      const size_t b = m.content.find_first_not_of(" \n"), e = m.content.find_last_not_of(" \n");
      const std::string core = m.content.substr(b, e - b + 1);
      const bool in_trained = trained.find(core) != std::string::npos;
      if (m.role == "assistant") {
        EXPECT_TRUE(in_trained) << family << ": " << m.content;
      }
    }
    EXPECT_EQ(trained.find("Hi there!"), std::string::npos) << family;
    EXPECT_EQ(trained.find("3+3"), std::string::npos) << family;
  }
}

// One user turn and the generation prompt (`zero generate --chat`) equals
// apply_chat_template(messages, add_generation_prompt=True).
TEST(ChatTemplate, GenerationPromptAsTransformers) {
  const nlohmann::json f = fixtures();
  ASSERT_EQ(f["generation_prompt_cases"].size(), 24u);
  for (const auto& c : f["generation_prompt_cases"]) {
    const std::string family = c["family"];
    auto t = fixture_template(f, family);
    ASSERT_TRUE(t.ok()) << family << ": " << t.status().to_string();
    const std::vector<ChatMessage> messages = fixture_messages(c);
    auto segments = t->render(messages, /*add_generation_prompt=*/true);
    ASSERT_TRUE(segments.ok()) << family << ": " << segments.status().to_string();
    std::string text;
    for (const ChatSegment& s : *segments) text += s.text;
    EXPECT_EQ(text, c["text"].get<std::string>()) << family;
    EXPECT_TRUE(text.ends_with(t->generation_prompt())) << family;
    EXPECT_FALSE(segments->back().trained) << family;
  }
}

TEST(ChatTemplate, EndOfTurnTokens) {
  EXPECT_EQ(ChatTemplate(ChatFamily::kChatMl, "", "").end_of_turn_token(), "<|im_end|>");
  EXPECT_EQ(ChatTemplate(ChatFamily::kLlama3, "", "").end_of_turn_token(), "<|eot_id|>");
  // Mistral and Zephyr end replies with eos_token, which stops generation anyway.
  EXPECT_EQ(ChatTemplate(ChatFamily::kMistral, "", "").end_of_turn_token(), std::nullopt);
  EXPECT_EQ(ChatTemplate(ChatFamily::kZephyr, "", "").end_of_turn_token(), std::nullopt);
  EXPECT_EQ(ChatTemplate(ChatFamily::kGemma, "", "").end_of_turn_token(), "<end_of_turn>");
  EXPECT_EQ(ChatTemplate(ChatFamily::kGemma3, "", "").end_of_turn_token(), "<end_of_turn>");
  EXPECT_EQ(ChatTemplate(ChatFamily::kPhi3, "", "").end_of_turn_token(), "<|end|>");
}

// The families' templates as each recognises them, and where they raise.
TEST(ChatTemplate, GemmaAndPhi3Families) {
  const nlohmann::json f = fixtures();
  EXPECT_EQ(fixture_template(f, "gemma")->family(), ChatFamily::kGemma);
  EXPECT_EQ(fixture_template(f, "gemma3")->family(), ChatFamily::kGemma3);
  EXPECT_EQ(fixture_template(f, "phi3")->family(), ChatFamily::kPhi3);
  EXPECT_EQ(fixture_template(f, "phi35")->family(), ChatFamily::kPhi3);
  // Gemma 1/2 raise on a system turn; Gemma 3 only where it is not first; both need alternation.
  auto gemma = fixture_template(f, "gemma");
  EXPECT_NE(gemma->render({{"system", "s"}, {"user", "u"}})
                .status()
                .message()
                .find("not at all (System role not supported)"),
            std::string::npos);
  auto gemma3 = fixture_template(f, "gemma3");
  EXPECT_TRUE(gemma3->render({{"system", "s"}, {"user", "u"}}).ok());
  EXPECT_NE(gemma3->render({{"user", "u"}, {"system", "s"}}).status().message().find("message 1"),
            std::string::npos);
  EXPECT_NE(gemma->render({{"user", "u"}, {"user", "v"}})
                .status()
                .message()
                .find("alternating user/assistant"),
            std::string::npos);
  // Phi-3 ends a conversation with eos_token (untrained); the reply and its <|end|> are trained.
  auto phi3 = fixture_template(f, "phi3");
  auto segments = phi3->render({{"user", "u"}, {"assistant", "a"}});
  ASSERT_TRUE(segments.ok());
  EXPECT_EQ(segments->back().text, "</s>");
  EXPECT_FALSE(segments->back().trained);
  std::string trained;
  for (const ChatSegment& s : *segments) trained += s.trained ? s.text : "";
  EXPECT_EQ(trained, "a<|end|>");
  // The first Phi-3-mini template (BOS, the assistant header inside the user turn) is refused.
  auto first_phi3 = ChatTemplate::recognise(
      std::string("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') "
                  "%}{{'<|user|>' + '\\n' + message['content'] + '<|end|>' + '\\n' + "
                  "'<|assistant|>' + '\\n'}}{% elif (message['role'] == 'assistant') "
                  "%}{{message['content'] + '<|end|>' + '\\n'}}{% endif %}{% endfor %}"),
      "<s>", "</s>", "c.json");
  ASSERT_FALSE(first_phi3.ok());
  EXPECT_NE(first_phi3.status().message().find("not Phi-3's"), std::string::npos);
}

// for_tokenizer reads the template and the bos/eos texts of the tokenizer's config, and names
// tokenizer_config.json when it is missing or holds no known template.
TEST(ChatTemplate, ForTokenizerNamesTheConfig) {
  const std::string dir = std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/tokenizers/llama3_split";
  auto plain = Tokenizer::load(dir);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  auto none = ChatTemplate::for_tokenizer(*plain);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(),
            dir +
                "/tokenizer_config.json: no chat_template, so a conversation cannot be rendered "
                "with the model's template");

  std::ifstream tj(dir + "/tokenizer.json"), cj(dir + "/tokenizer_config.json");
  std::stringstream ts, cs;
  ts << tj.rdbuf();
  cs << cj.rdbuf();
  nlohmann::json config = nlohmann::json::parse(cs.str());
  config["chat_template"] = fixtures()["templates"]["llama3"];
  auto tok = Tokenizer::from_strings(ts.str(), config.dump(), dir + "/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto llama3 = ChatTemplate::for_tokenizer(*tok);
  ASSERT_TRUE(llama3.ok()) << llama3.status().to_string();
  EXPECT_EQ(llama3->family(), ChatFamily::kLlama3);
  auto segments = llama3->render({{"user", "Hi"}});
  ASSERT_TRUE(segments.ok());
  EXPECT_EQ(segments->front().text.rfind("<|begin_of_text|><|start_header_id|>", 0), 0u)
      << "the template's bos_token is the tokenizer's BOS text";

  auto no_config = Tokenizer::from_strings(ts.str(), "", "/nowhere/tokenizer.json");
  ASSERT_TRUE(no_config.ok());
  EXPECT_EQ(ChatTemplate::for_tokenizer(*no_config).status().message(),
            "/nowhere/tokenizer_config.json: not found, so the tokenizer has no chat_template to "
            "render a conversation with");
}

TEST(ChatTemplate, RefusalsNameWhat) {
  auto other = ChatTemplate::recognise(std::string("{{ messages | tojson }}"), "", "", "c.json");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("c.json: chat_template is none of ChatML, Llama-3, "
                                          "Mistral [INST], Gemma, Phi-3 or Zephyr (it begins "
                                          "\"{{ messages"),
            std::string::npos)
      << other.status().message();
  EXPECT_FALSE(ChatTemplate::recognise(std::nullopt, "", "", "c.json").ok());
  auto qwen = ChatTemplate::recognise(
      std::string("{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a helpful "
                  "assistant.<|im_end|>{% endif %}"),
      "", "", "c.json");
  EXPECT_FALSE(qwen.ok());

  // Llama-2's [INST] template (system in <<SYS>>, BOS per turn) is not Mistral's: refused.
  auto llama2 = ChatTemplate::recognise(
      std::string(
          "{% for message in messages %}{% if message['role'] == 'system' %}{{ '<<SYS>>\\n' "
          "+ message['content'] + '\\n<</SYS>>\\n\\n' }}{% elif message['role'] == 'user' "
          "%}{{ bos_token + '[INST] ' + message['content'].strip() + ' [/INST]' }}{% endif "
          "%}{% endfor %}"),
      "<s>", "</s>", "c.json");
  EXPECT_FALSE(llama2.ok());
  auto no_space = ChatTemplate::recognise(
      std::string("{{ bos_token }}{% for message in messages %}{{ '[INST] ' + message['content'] "
                  "+ '[/INST]' }}{% endfor %}"),
      "<s>", "</s>", "c.json");
  EXPECT_FALSE(no_space.ok());

  ChatTemplate chatml(ChatFamily::kChatMl, "<s>", "</s>");
  auto role = chatml.render({{"user", "a"}, {"bot", "b"}});
  ASSERT_FALSE(role.ok());
  EXPECT_EQ(role.status().message(), "message 1: unknown role \"bot\" (system, user or assistant)");
  ChatTemplate mistral(ChatFamily::kMistral, "<s>", "</s>");
  EXPECT_FALSE(mistral.render({{"user", "a"}, {"user", "b"}}).ok());
  EXPECT_FALSE(mistral.render({{"system", "a"}, {"user", "b"}}).ok());
}

}  // namespace
}  // namespace zero::text
