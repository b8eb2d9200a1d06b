// tokenizer.json's "model" of type BPE: vocab, ranked merges, byte_fallback (<0xNN> tokens for
// characters outside the vocab, as Llama-2 / Mistral), unk_token with fuse_unk, ignore_merges
// (Llama-3: a word already in the vocab is one token). The merge loop is a priority queue over
// adjacent pairs (O(n log n) per word) behind a per-thread word cache.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace zero::text {

// Hashes std::string and std::string_view alike, so maps keyed by std::string are searched with a
// string_view without building a temporary string (C++20 heterogeneous lookup).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // `j` is the "model" object. Refuses other model types, dropout, continuing_subword_prefix and
  // end_of_word_suffix (not implemented), and merges naming tokens outside the vocab.
  static StatusOr<BpeModel> from_json(const nlohmann::json& j, const std::string& where);

  // Appends the ids of one pre-tokenized word. Thread-safe: each thread has its own word cache.
  void tokenize(std::string_view word, std::vector<int32_t>* ids) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token string of `id`, or nullptr when no vocab entry has that id.
  const std::string* id_to_token(int32_t id) const;
  // One past the largest id in the vocab.
  int64_t id_bound() const { return static_cast<int64_t>(id_to_token_.size()); }

 private:
  struct MergeResult {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  void merge_word(std::string_view word, std::vector<int32_t>* ids) const;

  StringMap<int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_token_;  // per id: a vocab entry exists (ids may have gaps)
  std::unordered_map<uint64_t, MergeResult> merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::vector<int32_t> byte_ids_;  // <0xNN> ids by byte, -1 when absent (byte_fallback)
  uint64_t cache_owner_ = 0;       // distinguishes this model's entries in the thread caches
};

}  // namespace zero::text
