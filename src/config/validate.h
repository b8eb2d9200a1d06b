// Strict validation of a parsed ds_config against the schema (schema.h) and DeepSpeed's own
// cross-key constraints. Collects every problem at once as Diagnostics with full JSON paths.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
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
