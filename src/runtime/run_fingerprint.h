// The fingerprint of a `zero train` run that every rank must share before any work
// (start_agreement.h): the effective DeepSpeed config, the model, the data and the run plan.
#pragma once

#include <cstdint>

#include "model/model_config.h"
#include "runtime/run_plan.h"
#include "runtime/start_agreement.h"
#include "runtime/trainer.h"

namespace zero::runtime {

RunFingerprint run_fingerprint(const TrainArgs& args, const Plan& plan,
                               const model::ModelConfig& mc, int64_t block, int64_t num_samples,
                               int64_t max_steps, int64_t start_step);

}  // namespace zero::runtime
