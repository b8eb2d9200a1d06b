// tokenizer.json's "normalizer": the SentencePiece-style rewriting Llama-2 / Mistral / TinyLlama
// use (Prepend "▁", Replace " " -> "▁"), the Unicode normal forms (NFC as Qwen2; NFD, NFKC, NFKD)
// through ICU, alone or in a Sequence. Other normalizers are refused at load time, not skipped.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "text/pattern.h"

namespace zero::text {

class Normalizer {
 public:
  // `j` is the "normalizer" value (null: no normalizer). `where` names the file in errors.
  static StatusOr<Normalizer> from_json(const nlohmann::json& j, const std::string& where);

  bool empty() const { return steps_.empty(); }
  // The normalized form of one piece of input. REQUIRES: valid UTF-8.
  StatusOr<std::string> normalize(std::string_view text) const;

 private:
  struct Prepend {
    std::string prefix;
  };
  struct Replace {
    Pattern pattern;
    std::string content;
  };
  enum class UnicodeForm { kNfc, kNfd, kNfkc, kNfkd };
  struct Normalize {
    UnicodeForm form;
  };
  using Step = std::variant<Prepend, Replace, Normalize>;
  static Status append_steps(const nlohmann::json& j, const std::string& where,
                             std::vector<Step>* steps);

  std::vector<Step> steps_;
};

// Replaces every match of `pattern` in `text` by `content`.
StatusOr<std::string> replace_all(const Pattern& pattern, std::string_view text,
                                  std::string_view content);

}  // namespace zero::text
