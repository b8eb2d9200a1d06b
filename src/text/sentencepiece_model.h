// A SentencePiece `tokenizer.model` read through libsentencepiece, for model directories that ship
// no tokenizer.json. Encode and decode are SentencePiece's own; control pieces (<s>, </s>) decode
// as their text unless skipped. Immutable after load; safe to share between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace zero::text {

class SentencePieceModel {
 public:
  // Reads `path` (a tokenizer.model); the error names the file.
  static StatusOr<std::shared_ptr<const SentencePieceModel>> load(const std::string& path);
  ~SentencePieceModel();

  StatusOr<std::vector<int32_t>> encode(std::string_view text) const;
  // SentencePiece's decoder over the ids without control pieces (`skip_control`), or over each
  // run between control pieces with the control pieces' text in between.
  // REQUIRES: every id < vocab_size().
  StatusOr<std::string> decode(std::span<const int32_t> ids, bool skip_control) const;

  int64_t vocab_size() const;
  std::optional<int32_t> piece_to_id(std::string_view piece) const;
  std::string id_to_piece(int32_t id) const;
  bool is_control(int32_t id) const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> pad_id() const;
  std::optional<int32_t> unk_id() const;
  // The serialized model, for the content hash.
  std::string serialized() const;

 private:
  SentencePieceModel();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

}  // namespace zero::text
