// The run plan of `zero train` (issue 10 item 6): the ds_config, the HF-Trainer-style flags and
// the model resolved into everything a run needs — the effective config ("auto" values filled by
// flags or TrainingArguments' defaults, contradictions refused), the batch triad for the real world
// size, the step count (epochs counted as the HF Trainer does), the LR schedule, and the engine
// options mapped from the typed DsConfig. Pure: no files written, no collectives; unit-tested.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/ds_config.h"
#include "config/effective.h"
#include "core/status.h"
#include "model/model_config.h"
#include "runtime/engine.h"
#include "runtime/trainer.h"

namespace zero::runtime {

// Everything the run needs, resolved from the config, the flags and the model.
struct Plan {
  config::EffectiveConfig effective;
  config::DsConfig ds;
  int64_t micro_batch = 0, grad_accum = 0, train_batch = 0;
  int64_t max_steps = 0;  // --max_steps, or counted from --num_train_epochs
  EngineOptions engine;
  std::vector<std::string> notes;  // warnings to print once on rank 0
  std::vector<std::string> info;   // lines of the banner (rank 0, stdout)
};

// Resolves the plan for a world of `world` ranks and a dataset of `num_samples` samples. Reads the
// --deepspeed file when one is given. Errors name the flag or config key.
StatusOr<Plan> make_plan(const TrainArgs& args, const model::ModelConfig& model, int world,
                         int64_t num_samples);

// The ZeRO options of a typed config (`eff` for keys the typed config leaves optional);
// communication_data_type defaults to `model_dtype`, as in DeepSpeed.
sharding::ZeroOptions zero_options_from_ds(const config::DsConfig& ds,
                                           const config::EffectiveConfig& eff, DType model_dtype);
// offload_optimizer, offload_param and aio as the engine takes them (before the engine's
// stage-dependent sanitizing).
OffloadOptions offload_options_from_ds(const config::DsConfig& ds);

}  // namespace zero::runtime
