// Format detection (llm.c magic vs raw), size validation and vocab-checked sample reads.
#include "data/token_dataset.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "core/check.h"

namespace zero {

static_assert(std::endian::native == std::endian::little, "token files are little endian");

namespace {

uint64_t token_bytes(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::kUint16: return 2;
    case TokenDType::kUint32: return 4;
    case TokenDType::kUint8: return 1;
  }
  return 4;
}

}  // namespace

const char* token_dtype_name(TokenDType dtype) {
  switch (dtype) {
    case TokenDType::kUint16: return "uint16";
    case TokenDType::kUint32: return "uint32";
    case TokenDType::kUint8: return "uint8";
  }
  return "?";
}

std::optional<TokenDType> parse_token_dtype(std::string_view name) {
  for (TokenDType d : {TokenDType::kUint8, TokenDType::kUint16, TokenDType::kUint32}) {
    if (name == token_dtype_name(d)) return d;
  }
  return std::nullopt;
}

StatusOr<TokenDataset> TokenDataset::open(Storage& storage, const std::string& path,
                                          const TokenDatasetOptions& options) {
  if (options.block_size <= 0) {
    return invalid_argument("{}: block_size must be positive, got {}", path, options.block_size);
  }
  if (options.vocab_size <= 0) {
    return invalid_argument("{}: vocab_size must be positive, got {}", path, options.vocab_size);
  }
  ZERO_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, storage.open_read(path));
  TokenDataset ds;
  const uint64_t file_bytes = file->size();
  int32_t header[3] = {0, 0, 0};
  if (file_bytes >= kLlmcHeaderBytes)
    ZERO_RETURN_IF_ERROR(file->read_at(0, sizeof(header), header));

  if (file_bytes >= kLlmcHeaderBytes && header[0] == kLlmcMagic) {
    ds.format_ = TokenFileFormat::kLlmc;
    if (header[1] != 1 && header[1] != 2) {
      return invalid_argument(
          "{}: llm.c token file version {} is not supported (1: uint16 tokens, 2: uint32)", path,
          header[1]);
    }
    ds.dtype_ = header[1] == 1 ? TokenDType::kUint16 : TokenDType::kUint32;
    if (options.dtype && *options.dtype != ds.dtype_) {
      return invalid_argument("{}: --data_dtype {} contradicts the llm.c header (version {}: {})",
                              path, token_dtype_name(*options.dtype), header[1],
                              token_dtype_name(ds.dtype_));
    }
    if (header[2] < 0)
      return invalid_argument("{}: llm.c header token count {} is negative", path, header[2]);
    ds.data_offset_ = kLlmcHeaderBytes;
    ds.num_tokens_ = header[2];
    const uint64_t want =
        kLlmcHeaderBytes + static_cast<uint64_t>(header[2]) * token_bytes(ds.dtype_);
    if (want != file_bytes) {
      return data_loss(
          "{}: llm.c header says {} {} tokens ({} bytes with header), file has {} bytes", path,
          header[2], token_dtype_name(ds.dtype_), want, file_bytes);
    }
  } else {
    ds.format_ = TokenFileFormat::kRaw;
    ds.dtype_ = options.dtype.value_or(TokenDType::kUint16);
    const uint64_t tb = token_bytes(ds.dtype_);
    if (file_bytes % tb != 0) {
      return data_loss(
          "{}: {} bytes is not a whole number of {} tokens; truncated or wrong "
          "--data_dtype?",
          path, file_bytes, token_dtype_name(ds.dtype_));
    }
    ds.num_tokens_ = static_cast<int64_t>(file_bytes / tb);
  }
  if (ds.num_tokens_ < options.block_size + 1) {
    return invalid_argument(
        "{}: {} tokens is too few for one sample of block_size {} (needs block_size + 1 = {})",
        path, ds.num_tokens_, options.block_size, options.block_size + 1);
  }
  ds.block_size_ = options.block_size;
  ds.vocab_size_ = options.vocab_size;
  ds.num_samples_ = (ds.num_tokens_ - 1) / ds.block_size_;
  ds.file_ = std::move(file);
  if (options.mask_path) {
    ZERO_ASSIGN_OR_RETURN(ds.mask_, storage.open_read(*options.mask_path));
    if (ds.mask_->size() != static_cast<uint64_t>(ds.num_tokens_)) {
      return data_loss("{}: {} bytes, but {} holds {} tokens (one mask byte each)",
                       *options.mask_path, ds.mask_->size(), path, ds.num_tokens_);
    }
  }
  if (options.validate_upfront) ZERO_RETURN_IF_ERROR(ds.validate_all_tokens());
  return ds;
}

Status TokenDataset::read_tokens(int64_t first, int64_t count, uint32_t* out) const {
  const uint64_t tb = token_bytes(dtype_);
  const uint64_t offset = data_offset_ + static_cast<uint64_t>(first) * tb;
  if (dtype_ == TokenDType::kUint32) {
    ZERO_RETURN_IF_ERROR(file_->read_at(offset, static_cast<size_t>(count) * 4, out));
  } else if (dtype_ == TokenDType::kUint8) {
    // Bytes go into the last quarter of `out`, widened front to back (as for uint16 below).
    uint8_t* narrow = reinterpret_cast<uint8_t*>(out) + 3 * count;
    ZERO_RETURN_IF_ERROR(file_->read_at(offset, static_cast<size_t>(count), narrow));
    for (int64_t i = 0; i < count; ++i) out[i] = narrow[i];
  } else {
    // Read the uint16s into the back half of `out`, then widen front to back (never overwrites a
    // uint16 not yet widened: element i is written at bytes [4i, 4i+4), read from 2*count + 2i).
    uint16_t* narrow = reinterpret_cast<uint16_t*>(out) + count;
    ZERO_RETURN_IF_ERROR(file_->read_at(offset, static_cast<size_t>(count) * 2, narrow));
    for (int64_t i = 0; i < count; ++i) {
      uint16_t v;
      std::memcpy(&v, narrow + i, 2);
      out[i] = v;
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    if (out[i] >= static_cast<uint64_t>(vocab_size_)) {
      return invalid_argument("{}: token id {} at position {} is >= vocab_size {}", path(), out[i],
                              first + i, vocab_size_);
    }
  }
  return ok_status();
}

Status TokenDataset::get_sample(int64_t g, int32_t* inputs_T, int32_t* targets_T) const {
  ZERO_CHECK(g >= 0 && g < num_samples_, "sample ", g, " outside [0, ", num_samples_, ")");
  const int64_t T = block_size_;
  std::vector<uint32_t> tokens(static_cast<size_t>(T + 1));
  ZERO_RETURN_IF_ERROR(read_tokens(g * T, T + 1, tokens.data()));
  for (int64_t t = 0; t < T; ++t) {
    inputs_T[t] = static_cast<int32_t>(tokens[static_cast<size_t>(t)]);
    targets_T[t] = static_cast<int32_t>(tokens[static_cast<size_t>(t + 1)]);
  }
  if (mask_) {
    std::vector<uint8_t> mask(static_cast<size_t>(T));
    ZERO_RETURN_IF_ERROR(
        mask_->read_at(static_cast<uint64_t>(g * T + 1), static_cast<size_t>(T), mask.data()));
    for (int64_t t = 0; t < T; ++t) {
      if (mask[static_cast<size_t>(t)] == 0) targets_T[t] = kIgnoreTarget;
    }
  }
  return ok_status();
}

Status TokenDataset::validate_all_tokens() const {
  constexpr int64_t kChunk = 1 << 20;
  std::vector<uint32_t> buf(static_cast<size_t>(std::min(kChunk, num_tokens_)));
  for (int64_t first = 0; first < num_tokens_; first += kChunk) {
    ZERO_RETURN_IF_ERROR(read_tokens(first, std::min(kChunk, num_tokens_ - first), buf.data()));
  }
  return ok_status();
}

}  // namespace zero
