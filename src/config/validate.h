// Strict validation of a parsed ds_config against the schema (schema.h) and DeepSpeed's own
// cross-key constraints. Collects every problem at once as Diagnostics with full JSON paths.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/json_text.h"

namespace zero::config {

enum class Severity { kError, kWarning };

struct Diagnostic {
  Severity severity = Severity::kError;
  std::string
      path;  // full JSON path of the key ("zero_optimization.stage"); "(root)" for the document
  std::string message;  // what is wrong, quoting offending values as written
  std::string hint;     // optional: what to do ("did you mean ...?"); printed in parentheses
};

struct ValidateOptions {
  // Data-parallel world size. When set, the batch triad must be complete and consistent; without it
  // the trainer's flags may still supply the batch sizes.
  std::optional<int64_t> world_size;
  bool strict = false;  // warnings become errors
};

struct ValidationReport {
  std::vector<Diagnostic> diagnostics;  // in document order, errors and warnings interleaved

  int error_count() const;
  int warning_count() const;
  bool ok() const { return error_count() == 0; }
  // One line per diagnostic: "error: <path>: <message> (<hint>)" / "warning: ...".
  std::string format() const;
};

std::string format_diagnostic(const Diagnostic& d);

// Validates `config` (the parsed document). `sources`, when given, lets messages quote numbers
// exactly as written ("2e8" rather than 200000000.0). Never touches the filesystem.
ValidationReport validate_ds_config(const Json& config, const ValidateOptions& options,
                                    const SourceMap* sources = nullptr);

// pydantic v2's lax reading of a string as a boolean, which DeepSpeed's pydantic-modelled blocks
// (fp16, bf16, zero_optimization, the monitors, ...) apply: "true"/"false", "yes"/"no", "on"/"off",
// "t"/"f", "y"/"n" in any letter case, and exactly "1"/"0". nullopt for any other string ("auto",
// " true", "enabled").
std::optional<bool> pydantic_bool(std::string_view text);

// One boolean key that was written as a string.
struct CoercedBoolean {
  std::string path;     // "fp16.enabled"
  std::string written;  // the string as written, without quotes: "false"
  bool value = false;
};

// Replaces, in place, every string that pydantic_bool reads as a boolean on a boolean key of the
// schema (optimizer / scheduler params by their type included) with that boolean, and returns what
// it replaced, in document order. The loader applies it, so everything after it sees real
// booleans; validate_ds_config warns about each such key, and build_effective_config applies it
// too for documents that did not come through the loader.
std::vector<CoercedBoolean> coerce_string_booleans(Json& config);

// DeepSpeed's batch-size triad derivation (train_batch_size = micro × accumulation × world).
struct BatchTriad {
  std::optional<int64_t> train_batch_size;
  std::optional<int64_t> micro_batch_per_gpu;
  std::optional<int64_t> gradient_accumulation_steps;
};
// Fills the missing members following DeepSpeed's rules (integer division) and checks the
// product. On failure, returns kInvalidArgument whose message names the keys involved; `path`
// receives the JSON path the error belongs to.
StatusOr<BatchTriad> derive_batch_triad(const BatchTriad& given, int64_t world_size,
                                        std::string* path = nullptr);

}  // namespace zero::config
