// The prepared-data manifest (JSON) and the plain-text check for --train_file.
#include "data/prepared_data.h"

#include <algorithm>
#include <vector>

#include <nlohmann/json.hpp>

namespace zero {

namespace {

// Bytes of the UTF-8 sequence starting at s[i] (1..4), 0 when invalid, -1 when cut off by the end
// of `s`.
int utf8_bytes_at(const uint8_t* s, size_t n, size_t i) {
  const uint8_t c = s[i];
  if (c < 0x80) return 1;
  int len;
  uint8_t lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  for (int k = 1; k < len; ++k) {
    if (i + k >= n) return -1;
    const uint8_t b = s[i + k];
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return 0;
  }
  return len;
}

}  // namespace

std::string prepared_tokens_path(const std::string& prefix) { return prefix + ".tokens"; }
std::string prepared_mask_path(const std::string& prefix) { return prefix + ".mask"; }
std::string prepared_manifest_path(const std::string& prefix) { return prefix + ".manifest.json"; }

std::optional<std::string> find_prepared_prefix(Storage& storage, const std::string& train_file) {
  if (storage.file_exists(prepared_manifest_path(train_file))) return train_file;
  const std::string ext = ".tokens";
  if (train_file.size() > ext.size() &&
      train_file.compare(train_file.size() - ext.size(), ext.size(), ext) == 0) {
    std::string prefix = train_file.substr(0, train_file.size() - ext.size());
    if (storage.file_exists(prepared_manifest_path(prefix))) return prefix;
  }
  return std::nullopt;
}

std::string manifest_to_json(const PreparedManifest& m) {
  nlohmann::ordered_json sources = nlohmann::ordered_json::array();
  for (const PreparedSource& s : m.sources) {
    sources.push_back({{"path", s.path}, {"bytes", s.bytes}, {"documents", s.documents}});
  }
  nlohmann::ordered_json j = {{"format", kPreparedFormat},
                              {"version", kPreparedVersion},
                              {"tokenizer_hash", m.tokenizer_hash},
                              {"vocab_size", m.vocab_size},
                              {"eos_id", m.eos_id},
                              {"token_dtype", token_dtype_name(m.dtype)},
                              {"num_tokens", m.num_tokens},
                              {"num_trained_tokens", m.num_trained_tokens},
                              {"num_documents", m.num_documents},
                              {"sources", sources}};
  return j.dump(1) + "\n";
}

StatusOr<PreparedManifest> manifest_from_json(const std::string& json, const std::string& source) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("{}: not a JSON object", source);
  if (j.value("format", std::string()) != kPreparedFormat) {
    return invalid_argument("{}: \"format\" is not \"{}\"", source, kPreparedFormat);
  }
  if (!j.contains("version") || !j["version"].is_number_integer() ||
      j["version"].get<int>() != kPreparedVersion) {
    return invalid_argument("{}: \"version\" {} is not supported (this build reads {})", source,
                            j.contains("version") ? j["version"].dump() : "missing",
                            kPreparedVersion);
  }
  PreparedManifest m;
  try {
    m.tokenizer_hash = j.at("tokenizer_hash").get<std::string>();
    m.vocab_size = j.at("vocab_size").get<int64_t>();
    m.eos_id = j.at("eos_id").get<int32_t>();
    const std::string dtype = j.at("token_dtype").get<std::string>();
    const std::optional<TokenDType> parsed = parse_token_dtype(dtype);
    if (!parsed || *parsed == TokenDType::kUint8) {
      return invalid_argument("{}: \"token_dtype\" {} is not uint16 or uint32", source, dtype);
    }
    m.dtype = *parsed;
    m.num_tokens = j.at("num_tokens").get<int64_t>();
    m.num_trained_tokens = j.at("num_trained_tokens").get<int64_t>();
    m.num_documents = j.at("num_documents").get<int64_t>();
    for (const auto& s : j.at("sources")) {
      m.sources.push_back({s.at("path").get<std::string>(), s.at("bytes").get<uint64_t>(),
                           s.at("documents").get<int64_t>()});
    }
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("{}: {}", source, e.what());
  }
  return m;
}

StatusOr<PreparedManifest> read_prepared_manifest(Storage& storage, const std::string& prefix) {
  const std::string path = prepared_manifest_path(prefix);
  ZERO_ASSIGN_OR_RETURN(std::string text, read_file(storage, path, kMaxMetadataFileBytes));
  ZERO_ASSIGN_OR_RETURN(PreparedManifest m, manifest_from_json(text, path));
  const uint64_t token_bytes = m.dtype == TokenDType::kUint16 ? 2 : 4;
  ZERO_ASSIGN_OR_RETURN(uint64_t tokens_bytes, storage.file_size(prepared_tokens_path(prefix)));
  if (tokens_bytes != static_cast<uint64_t>(m.num_tokens) * token_bytes) {
    return data_loss("{}: {} bytes, but {} says {} {} tokens", prepared_tokens_path(prefix),
                     tokens_bytes, path, m.num_tokens, token_dtype_name(m.dtype));
  }
  ZERO_ASSIGN_OR_RETURN(uint64_t mask_bytes, storage.file_size(prepared_mask_path(prefix)));
  if (mask_bytes != static_cast<uint64_t>(m.num_tokens)) {
    return data_loss("{}: {} bytes, but {} says {} tokens (one mask byte each)",
                     prepared_mask_path(prefix), mask_bytes, path, m.num_tokens);
  }
  return m;
}

bool looks_like_text(Storage& storage, const std::string& path) {
  auto file = storage.open_read(path);
  if (!file.ok()) return false;
  const size_t n = static_cast<size_t>(std::min<uint64_t>((*file)->size(), 64 * 1024));
  if (n == 0) return false;
  std::vector<uint8_t> buf(n);
  if (!(*file)->read_at(0, n, buf.data()).ok()) return false;
  size_t texty = 0;
  for (size_t i = 0; i < n;) {
    const uint8_t c = buf[i];
    if (c == 0) return false;
    const int len = utf8_bytes_at(buf.data(), n, i);
    if (len < 0) break;  // cut at the end of the window
    if (len == 0) return false;
    if (len > 1 || (c >= 0x20 && c < 0x7F) || c == '\n' || c == '\r' || c == '\t') texty += len;
    i += static_cast<size_t>(len);
  }
  return texty * 100 >= n * 95;
}

}  // namespace zero
