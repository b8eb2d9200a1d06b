// The effective config: the document with every default filled in, deprecated keys mapped to
// their successors, aliases normalised to one canonical name, and where each value came from.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "config/json_text.h"
#include "core/status.h"

namespace zero::config {

enum class Origin {
  kFile,     // written in the config
  kDefault,  // DeepSpeed's default (code, not docs)
  kAuto,     // "auto" in the config, still unresolved
  kFlag,     // "auto" (or an absent key) resolved from a command-line flag
  kDerived,  // computed from other values (batch triad, deprecated-key mapping)
};

const char* origin_name(Origin origin);  // "file", "default", "auto", "flag", "derived"

struct EffectiveConfig {
  Json json;  // canonical key names, blocks in schema order
  // Origin of every leaf (scalar, list or free-form map) by JSON path.
  std::map<std::string, Origin, std::less<>> origins;

  Origin origin(std::string_view path) const;  // kDefault when the path is unknown
};

// Builds the effective config of a document that validated without errors. `world_size`, when
// given and no batch key is "auto", completes the batch triad (origin kDerived).
// REQUIRES: validate_ds_config(config, ...) reported no error.
StatusOr<EffectiveConfig> build_effective_config(const Json& config,
                                                 std::optional<int64_t> world_size = std::nullopt);

// The effective config as JSON text with a `// file|default|auto|flag|derived` marker on every leaf
// line. The output is itself a loadable ds_config.
std::string render_effective_config(const EffectiveConfig& config);

// Resolves the value at `path` from the command-line flag `flag_name` (HF Trainer style): fills an
// "auto" or an absent/default value; an explicit file value that differs is an error naming both.
// `path` is canonical ("optimizer.params.lr"). Equal values are fine.
Status resolve_from_flag(EffectiveConfig& config, std::string_view path, const Json& flag_value,
                         std::string_view flag_name);

}  // namespace zero::config
