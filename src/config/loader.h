// Loading a ds_config the ways DeepSpeed accepts one: a file path, JSON text, or url-safe base64 of
// JSON text. Parsing only; validate_ds_config (validate.h) checks the content.
#pragma once

#include <string>
#include <string_view>

#include "config/json_text.h"
#include "core/status.h"

namespace zero::config {

struct LoadedConfig {
  std::string name;   // file path, or what the caller called the text; prefixes syntax errors
  Json json;          // the document, always an object
  SourceMap sources;  // where each value was written
};

// Parses `text` (JSON with comments and trailing commas, or base64 of it). Errors are
// kInvalidArgument "NAME: line L, column C: what".
StatusOr<LoadedConfig> load_ds_config_text(std::string_view text, std::string_view name);

// Reads and parses the file at `path`. Like DeepSpeed, a `path` that is not an existing file but
// is base64 of a JSON object is decoded instead. Errors: kNotFound / kIoError / kInvalidArgument.
StatusOr<LoadedConfig> load_ds_config_file(const std::string& path);

}  // namespace zero::config
