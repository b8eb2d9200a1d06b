// Tolerant JSON reader for ds_config files: the subset of hjson DeepSpeed users write (comments,
// trailing commas) on top of strict JSON, with duplicate-key detection and line/column errors.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace zero::config {

// Keys keep the order they were written in, so `config show` reads like the user's file.
using Json = nlohmann::ordered_json;

// Where a value was written and, for scalars, its exact text ("2e8", "1.0", "\"yes\"").
struct SourceSpan {
  int line = 0;    // 1-based
  int column = 0;  // 1-based, in characters (UTF-8 code points)
  std::string raw;
};

// JSON path ("zero_optimization.offload_param.device", "optimizer.params.betas[1]") -> span.
using SourceMap = std::map<std::string, SourceSpan, std::less<>>;

struct ParsedJson {
  Json value;
  SourceMap sources;
};

// Parses `text`. Accepted beyond RFC 8259: `//`, `/* */` and `#` comments, a trailing comma before
// `}` or `]`, CRLF line ends, a UTF-8 byte order mark. Rejected (hjson allows them, we do not):
// unquoted keys or strings, missing commas, multi-line strings. Duplicate keys are an error.
// Errors are kInvalidArgument with message "line L, column C: what".
StatusOr<ParsedJson> parse_json_text(std::string_view text);

// Decodes url-safe (or standard) base64, padding optional. nullopt when `text` is not base64.
std::optional<std::string> decode_base64(std::string_view text);

// Appends an object key to a JSON path: ("", "a") -> "a", ("a", "b") -> "a.b".
std::string path_join(std::string_view parent, std::string_view key);
// Appends an array index: ("a", 2) -> "a[2]".
std::string path_index(std::string_view parent, size_t index);

}  // namespace zero::config
