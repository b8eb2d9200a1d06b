// Loading a ds_config the ways DeepSpeed accepts one: a file path, JSON text, or url-safe base64 of
// JSON text. Parsing, plus DeepSpeed's reading of string booleans ("enabled": "false" is false,
// coerce_string_booleans in validate.h); validate_ds_config checks the content.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "config/json_text.h"
#include "core/status.h"

namespace zero::config {

struct LoadedConfig {
  std::string name;   // file path, or what the caller called the text; prefixes syntax errors
  Json json;          // the document, always an object; string booleans already replaced
  SourceMap sources;  // where each value was written, and its text as written
};

// Parses `text` (JSON with comments and trailing commas, or base64 of it). Errors are
// kInvalidArgument "NAME: line L, column C: what".
StatusOr<LoadedConfig> load_ds_config_text(std::string_view text, std::string_view name);

// Largest ds_config file read (real ones are a few KiB): bounds the memory a hostile or mistaken
// file can take (the parsed document with its source map takes ~60x the text).
inline constexpr uint64_t kMaxDsConfigBytes = uint64_t{16} << 20;

// Reads and parses the file at `path`. Like DeepSpeed, a `path` that is not an existing file but
// is base64 of a JSON object is decoded instead. Only a regular file of at most kMaxDsConfigBytes
// is read: a FIFO, a device (/dev/zero) or a directory is refused without blocking
// (read_regular_file in core/regular_file.h). Errors: kNotFound / kIoError / kInvalidArgument.
StatusOr<LoadedConfig> load_ds_config_file(const std::string& path);

}  // namespace zero::config
