// Shared between validate.cc (schema walk) and validate_rules.cc (cross-key rules). Not a public
// header.
#pragma once

#include <string>

#include "config/schema.h"
#include "config/validate.h"

namespace zero::config {

struct Context {
  const SourceMap* sources = nullptr;
  ValidationReport report;

  // The value as the user wrote it (from the source map), else its JSON text.
  std::string quote(const std::string& path, const Json& v) const;
  void error(std::string path, std::string message, std::string hint = {});
  void warning(std::string path, std::string message, std::string hint = {});
};

// Schema walk of one block / one value (validate.cc).
void check_block(Context& ctx, const BlockSpec& spec, const Json& obj, const std::string& path);
void check_key_value(Context& ctx, const KeySpec& k, const Json& v, const std::string& path);

// Optimizer / scheduler types and DeepSpeed's cross-key constraints (validate_rules.cc).
void check_rules(Context& ctx, const Json& config, const ValidateOptions& options);

}  // namespace zero::config
