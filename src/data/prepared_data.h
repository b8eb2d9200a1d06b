// Prepared training data (`zero data prepare`, docs/formats/data.md): PREFIX.tokens (raw uint16 or
// uint32 ids), PREFIX.mask (one byte per token, 1 = trained on) and PREFIX.manifest.json. This
// file holds the manifest's format, shared by the writer (src/text/data_preparer) and `zero
// train`, and the check that keeps plain text from being read as token ids.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/storage.h"
#include "data/token_dataset.h"

namespace zero {

inline constexpr const char* kPreparedFormat = "zero.prepared";
inline constexpr int kPreparedVersion = 1;

struct PreparedSource {
  std::string path;
  uint64_t bytes = 0;
  int64_t documents = 0;
};

struct PreparedManifest {
  std::string tokenizer_hash;  // Tokenizer::content_hash()
  int64_t vocab_size = 0;      // the tokenizer's
  int32_t eos_id = 0;          // separates documents
  TokenDType dtype = TokenDType::kUint16;
  int64_t num_tokens = 0;
  int64_t num_trained_tokens = 0;  // mask bytes equal to 1
  int64_t num_documents = 0;
  std::vector<PreparedSource> sources;
};

// The three paths of a prefix.
std::string prepared_tokens_path(const std::string& prefix);
std::string prepared_mask_path(const std::string& prefix);
std::string prepared_manifest_path(const std::string& prefix);

// The prefix `train_file` names, when it is prepared data: PREFIX itself (PREFIX.manifest.json
// exists) or PREFIX.tokens with the manifest next to it. nullopt otherwise.
std::optional<std::string> find_prepared_prefix(Storage& storage, const std::string& train_file);

std::string manifest_to_json(const PreparedManifest& m);
// Parses and checks a manifest (format, version, fields); errors name `source`.
StatusOr<PreparedManifest> manifest_from_json(const std::string& json, const std::string& source);
// Reads PREFIX.manifest.json and checks PREFIX.tokens / PREFIX.mask sizes against its counts.
StatusOr<PreparedManifest> read_prepared_manifest(Storage& storage, const std::string& prefix);

// True when the first 64 KiB of `path` read as text rather than token ids: no NUL byte, valid
// UTF-8 (a sequence cut at the 64 KiB boundary allowed), at least 95% printable ASCII, whitespace
// or multi-byte characters. (A uint16 file of ids < 256 has a NUL every other byte; arbitrary
// ids are almost never valid UTF-8 for long.) Unreadable files give false.
bool looks_like_text(Storage& storage, const std::string& path);

}  // namespace zero
