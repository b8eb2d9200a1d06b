// File / text / base64 entry points of the ds_config loader (loader.h).
#include "config/loader.h"

#include <sys/stat.h>
#include <cerrno>
#include <cstring>

#include "config/validate.h"
#include "core/regular_file.h"

namespace zero::config {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Base64 of a JSON object, as DeepSpeed accepts on its command line. Plain JSON starts with '{'
// (after comments), which is not a base64 character, so the two cannot be confused.
std::optional<std::string> decode_if_base64(std::string_view text) {
  std::string_view t = trim(text);
  if (t.empty() || t.front() == '{' || t.front() == '/' || t.front() == '#') return std::nullopt;
  auto decoded = decode_base64(t);
  if (!decoded) return std::nullopt;
  std::string_view d = trim(*decoded);
  if (d.empty() || d.front() != '{') return std::nullopt;
  return decoded;
}

const char* type_name(const Json& j) {
  switch (j.type()) {
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::null: return "null";
    default: return "a number";
  }
}

}  // namespace

StatusOr<LoadedConfig> load_ds_config_text(std::string_view text, std::string_view name) {
  std::string decoded_storage;
  std::string label(name);
  if (auto decoded = decode_if_base64(text)) {
    decoded_storage = std::move(*decoded);
    text = decoded_storage;
    label += " (base64-decoded)";
  }
  auto parsed = parse_json_text(text);
  if (!parsed.ok()) return parsed.status().with_context(label);
  if (!parsed->value.is_object()) {
    auto it = parsed->sources.find("");
    int line = it != parsed->sources.end() ? it->second.line : 1;
    int column = it != parsed->sources.end() ? it->second.column : 1;
    return invalid_argument(
        "{}: line {}, column {}: a DeepSpeed config must be a JSON object, "
        "found {}",
        label, line, column, type_name(parsed->value));
  }
  // "enabled": "false" is a boolean to DeepSpeed (pydantic); the source map keeps the quoted text,
  // from which validate_ds_config warns about it.
  coerce_string_booleans(parsed->value);
  return LoadedConfig{std::string(name), std::move(parsed->value), std::move(parsed->sources)};
}

StatusOr<LoadedConfig> load_ds_config_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    if (auto decoded = decode_if_base64(path)) return load_ds_config_text(*decoded, "<base64>");
    if (err == ENOENT) return not_found("{}: no such file", path);
    return io_error("{}: {}", path, std::strerror(err));
  }
  ZERO_ASSIGN_OR_RETURN(std::string text,
                        read_regular_file(path, kMaxDsConfigBytes, "a DeepSpeed config file"));
  return load_ds_config_text(text, path);
}

}  // namespace zero::config
