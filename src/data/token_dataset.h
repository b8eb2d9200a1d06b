// TokenDataset: a pre-tokenized training stream (docs/formats/data.md) cut into samples of
// block_size tokens with next-token targets. Reads through Storage on demand, so a multi-GB file
// costs no memory; every token id is checked against the vocabulary before it leaves this class.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"
#include "core/storage.h"

namespace zero {

// kUint8: every byte is a token (a plain text file read with a byte-level vocabulary of 256).
enum class TokenDType : uint8_t { kUint16, kUint32, kUint8 };
// "uint16" / "uint32" / "uint8", and back (nullopt for any other name).
const char* token_dtype_name(TokenDType dtype);
std::optional<TokenDType> parse_token_dtype(std::string_view name);

// How the file was recognised.
enum class TokenFileFormat : uint8_t {
  kRaw,   // headerless little-endian tokens (nanoGPT .bin)
  kLlmc,  // llm.c: 256 int32 header (magic 20240520, version, token count), then tokens
};

// llm.c's header: 256 little-endian int32; [0] magic, [1] version (1: uint16, 2: uint32 tokens),
// [2] number of tokens.
inline constexpr int32_t kLlmcMagic = 20240520;
inline constexpr uint64_t kLlmcHeaderBytes = 256 * 4;

// The target id of a token that is not trained on (HF's -100 labels; the model's ignore index).
inline constexpr int32_t kIgnoreTarget = -100;

struct TokenDatasetOptions {
  int64_t block_size = 0;  // T; REQUIRES > 0
  int64_t vocab_size = 0;  // ids must be < vocab_size; REQUIRES > 0
  // --data_dtype. Unset: uint16 for raw files, the header's for llm.c files. Set and contradicting
  // an llm.c header: an error naming both.
  std::optional<TokenDType> dtype;
  // Scan every token against vocab_size at open (one sequential pass) instead of only on access.
  bool validate_upfront = false;
  // A loss mask (`zero data prepare`'s PREFIX.mask): one byte per token, 1 = trained on. A target
  // whose token has mask 0 becomes kIgnoreTarget. The file must hold exactly N bytes.
  std::optional<std::string> mask_path;
};

// Immutable after open(); get_sample is thread-safe.
class TokenDataset {
 public:
  // Opens and validates `path`: size consistent with the format, N >= T + 1. Errors name the file.
  static StatusOr<TokenDataset> open(Storage& storage, const std::string& path,
                                     const TokenDatasetOptions& options);

  TokenDataset(TokenDataset&&) = default;
  TokenDataset& operator=(TokenDataset&&) = default;

  const std::string& path() const { return file_->path(); }
  TokenFileFormat format() const { return format_; }
  TokenDType dtype() const { return dtype_; }
  int64_t num_tokens() const { return num_tokens_; }    // N
  int64_t block_size() const { return block_size_; }    // T
  int64_t num_samples() const { return num_samples_; }  // S = floor((N - 1) / T)
  bool has_mask() const { return mask_ != nullptr; }

  // Sample g: inputs are tokens [g*T, g*T + T), targets tokens [g*T + 1, g*T + T + 1) (each
  // kIgnoreTarget where the mask, if any, is 0).
  // REQUIRES: 0 <= g < num_samples(); both outputs hold T ints. Errors: I/O, or a token id
  // >= vocab_size (naming the file, the token position and the id).
  Status get_sample(int64_t g, int32_t* inputs_T, int32_t* targets_T) const;

  // Checks every token id < vocab_size, reading the file sequentially in chunks.
  Status validate_all_tokens() const;

 private:
  TokenDataset() = default;
  // Reads tokens [first, first + count) widened to uint32 and vocab-checked.
  Status read_tokens(int64_t first, int64_t count, uint32_t* out) const;

  std::unique_ptr<RandomAccessFile> file_;
  std::unique_ptr<RandomAccessFile> mask_;  // null: every target is trained on
  TokenFileFormat format_ = TokenFileFormat::kRaw;
  TokenDType dtype_ = TokenDType::kUint16;
  uint64_t data_offset_ = 0;  // file offset of token 0
  int64_t num_tokens_ = 0;
  int64_t block_size_ = 0;
  int64_t vocab_size_ = 0;
  int64_t num_samples_ = 0;
};

}  // namespace zero
