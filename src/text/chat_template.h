// The chat templates `zero data prepare` renders natively: the four common families, recognised
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

enum class ChatFamily : uint8_t { kChatMl, kLlama3, kMistral, kZephyr };

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
  // (<|im_start|>), Llama-3 (<|start_header_id|>), Mistral / Llama-2 ([INST]), Zephyr (<|user|>).
  // `bos_token` / `eos_token` are the texts the template's bos_token / eos_token stand for.
  static StatusOr<ChatTemplate> recognise(const std::optional<std::string>& chat_template,
                                          std::string bos_token, std::string eos_token,
                                          const std::string& source);
  // The template of `tok`'s tokenizer_config.json, with the texts of its bos/eos tokens; errors
  // name that file (or its expected path when there was none) and what it holds instead.
  static StatusOr<ChatTemplate> for_tokenizer(const Tokenizer& tok);
  ChatTemplate(ChatFamily family, std::string bos_token, std::string eos_token)
      : family_(family), bos_(std::move(bos_token)), eos_(std::move(eos_token)) {}

  ChatFamily family() const { return family_; }
  // The conversation's segments, concatenated = the template's text. Errors: an unknown role, and
  // for Mistral a system message or roles that do not alternate user/assistant (as the template).
  StatusOr<std::vector<ChatSegment>> render(const std::vector<ChatMessage>& messages) const;
  // What apply_chat_template(add_generation_prompt=True) appends after the conversation: the
  // header of the assistant's turn ("" for Mistral, whose " [/INST]" already ends the prompt).
  std::string generation_prompt() const;
  // The token that ends an assistant turn when it is not EOS: ChatML <|im_end|>, Llama-3
  // <|eot_id|>; nullopt for the families whose turns end with eos_token (Mistral, Zephyr).
  std::optional<std::string> end_of_turn_token() const;

 private:
  ChatFamily family_;
  std::string bos_, eos_;
};

const char* chat_family_name(ChatFamily family);

}  // namespace zero::text
