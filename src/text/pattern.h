// A split/replace pattern of tokenizer.json: {"String": "..."} (a literal) or {"Regex": "..."}
// (run through PCRE2 with UTF and UCP, so \p{L}, \s and friends are Unicode-aware as in HF's
// Oniguruma). Immutable after construction and safe to share between threads.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace zero::text {

// A [begin, end) byte range of the input.
struct ByteSpan {
  size_t begin = 0;
  size_t end = 0;
};

class Pattern {
 public:
  static StatusOr<Pattern> literal(std::string text);
  static StatusOr<Pattern> regex(const std::string& expression);
  // {"String": s} or {"Regex": r}; `where` names the component in errors.
  static StatusOr<Pattern> from_json(const nlohmann::json& j, const std::string& where);

  // Non-overlapping matches, left to right. REQUIRES: `text` is valid UTF-8 (not re-checked).
  StatusOr<std::vector<ByteSpan>> find_all(std::string_view text) const;

 private:
  struct Compiled;
  std::string literal_;
  std::shared_ptr<const Compiled> regex_;  // null for a literal
};

// HF's SplitDelimiterBehavior: what happens to the matched parts when a string is split.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Splits [0, text_bytes) by `matches` (sorted, non-overlapping) as HF's NormalizedString::split
// does; `invert` swaps matched and unmatched parts. Empty pieces are dropped.
std::vector<ByteSpan> split_spans(size_t text_bytes, const std::vector<ByteSpan>& matches,
                                  SplitBehavior behavior, bool invert);

}  // namespace zero::text
