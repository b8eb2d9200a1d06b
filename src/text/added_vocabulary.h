// tokenizer.json's "added_tokens": tokens matched in the input before anything else (leftmost,
// longest first, as HF's Aho-Corasick LeftmostLongest). Tokens with "normalized": false are
// matched in the raw input; "normalized": true ones in each normalized piece, against their
// normalized content. lstrip / rstrip absorb neighbouring whitespace; single_word is refused.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"
#include "text/normalizer.h"
#include "text/pattern.h"

namespace zero::text {

struct AddedToken {
  std::string content;
  // The token's string in decode / id_to_token: HF gives the normalized content of a
  // "normalized" token (e.g. "▁foo" under Llama-2's Prepend normalizer), else the content.
  std::string token;
  int32_t id = 0;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
};

// A run of the input: an added token's id, or text (token_id < 0) still to be tokenized.
struct Segment {
  ByteSpan span;
  int32_t token_id = -1;
};

class AddedVocabulary {
 public:
  static StatusOr<AddedVocabulary> from_json(const nlohmann::json& added_tokens,
                                             const Normalizer& normalizer,
                                             const std::string& where);

  // Splits `text` on the raw-matched tokens (normalized == false) or, with `normalized_set`, on
  // the normalized-matched ones. The segments cover `text` in order; empty text runs are dropped.
  std::vector<Segment> split(std::string_view text, bool normalized_set) const;

  const AddedToken* find_id(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Patterns bucketed by first byte, longest first, so a scan checks only plausible candidates.
  struct MatchSet {
    std::vector<std::string> patterns;
    std::vector<int32_t> token_index;  // into tokens_, parallel to patterns
    std::array<std::vector<int32_t>, 256> by_first_byte;
  };
  void build(MatchSet* set) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> index_by_id_;
  std::unordered_map<std::string, int32_t> id_by_content_;
  MatchSet raw_;
  MatchSet normalized_;
};

}  // namespace zero::text
