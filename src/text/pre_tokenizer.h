// tokenizer.json's "pre_tokenizer": cuts a piece of (normalized) input into the words BPE merges
// within. Supported: ByteLevel (GPT-2's regex and byte alphabet), Split (a literal or a PCRE2
// regex, as Llama-3 and Qwen2 use), Metaspace (SentencePiece's "▁"), and Sequence of these.
// Anything else is refused at load time.
#pragma once

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "text/byte_level.h"
#include "text/pattern.h"

namespace zero::text {

// A piece of input on its way through pre-tokenization. `at_start`: it begins at byte 0 of the
// original input (Metaspace's prepend_scheme "first" prepends only there).
struct Piece {
  std::string text;
  bool at_start = false;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class PreTokenizer {
 public:
  // `j` is the "pre_tokenizer" value (null: none, the whole piece is one word).
  static StatusOr<PreTokenizer> from_json(const nlohmann::json& j, const std::string& where);

  // Replaces `pieces` by the words they split into (empty words dropped). REQUIRES: valid UTF-8.
  Status split(std::vector<Piece>* pieces) const;

 private:
  struct ByteLevel {
    bool add_prefix_space = false;
    bool use_regex = true;
  };
  struct Split {
    Pattern pattern;
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
  };
  struct Metaspace {
    std::string replacement;
    PrependScheme prepend_scheme = PrependScheme::kAlways;
    bool split = true;
    Pattern marker;  // the replacement, as a literal pattern for splitting
  };
  using Step = std::variant<ByteLevel, Split, Metaspace>;
  Status append_steps(const nlohmann::json& j, const std::string& where);
  Status apply(const Step& step, std::vector<Piece>* pieces) const;

  std::vector<Step> steps_;
  std::shared_ptr<const ByteLevelAlphabet> alphabet_;
  std::shared_ptr<const Pattern> gpt2_regex_;  // built when a ByteLevel step uses it
};

// Parses a Metaspace "prepend_scheme" / legacy "add_prefix_space" (shared with the decoder).
StatusOr<PrependScheme> parse_prepend_scheme(const nlohmann::json& j, const std::string& where);

}  // namespace zero::text
