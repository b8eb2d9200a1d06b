// HF Trainer's learning-rate schedules (transformers.get_scheduler, the `--lr_scheduler_type`
// flag): the LambdaLR multiplier of each type, and its parameters from `--lr_scheduler_kwargs`.
// Used when the ds_config has no `scheduler` block, as the HF Trainer does under DeepSpeed.
#pragma once

#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace zero::optim {

enum class HfScheduleType {
  kLinear,
  kCosine,
  kCosineWithRestarts,
  kPolynomial,
  kConstantWithWarmup,
  kInverseSqrt,
  kCosineWithMinLr,
  kWarmupStableDecay,
};
// warmup_stable_decay's warmup_type / decay_type.
enum class WsdShape { kLinear, kCosine, kOneMinusSqrt };

// One HF schedule with get_scheduler's defaults (only those of `type` are meaningful).
struct HfScheduleParams {
  HfScheduleType type = HfScheduleType::kLinear;
  int64_t num_warmup_steps = 0;
  int64_t num_training_steps = 0;
  double lr_init = 0;        // the optimizer's lr (polynomial divides by it)
  double num_cycles = 0.5;   // cosine, cosine_with_min_lr, wsd: 0.5; cosine_with_restarts: 1
  double lr_end = 1e-7;      // polynomial
  double power = 1.0;        // polynomial
  int64_t timescale = 0;     // inverse_sqrt: num_warmup_steps, or 10000 when that is 0
  double min_lr_rate = 0.0;  // cosine_with_min_lr (min_lr / lr_init when min_lr is given)
  // warmup_stable_decay
  int64_t num_stable_steps = 0;
  int64_t num_decay_steps = 0;
  WsdShape warmup_shape = WsdShape::kLinear;
  WsdShape decay_shape = WsdShape::kCosine;
  double min_lr_ratio = 0.0;
};

// The LambdaLR multiplier at scheduler step `step` (0-based: the number of optimizer updates
// already taken). The u-th update (1-based) runs at lr_init * hf_lr_lambda(p, u - 1).
double hf_lr_lambda(const HfScheduleParams& p, int64_t step);

// The names get_scheduler accepts here ("linear", "cosine", ...).
std::string_view hf_schedule_name(HfScheduleType type);

// Whether HF schedule `name` depends on num_training_steps (the run's steps): false for
// constant, constant_with_warmup, inverse_sqrt and names that are not HF schedules.
bool hf_schedule_uses_total(std::string_view name);

// get_scheduler(name, num_warmup_steps, num_training_steps, scheduler_specific_kwargs) for every
// type but "constant" (the optimizer's lr: LrSchedule::constant) and "reduce_lr_on_plateau" (it
// needs evaluation metrics: UNIMPLEMENTED). `kwargs` is --lr_scheduler_kwargs (an object, or null);
// an unknown key, or any key for a type HF passes none to, is INVALID_ARGUMENT naming it.
StatusOr<HfScheduleParams> hf_schedule_from_flags(std::string_view name,
                                                  const nlohmann::json& kwargs,
                                                  int64_t num_warmup_steps,
                                                  int64_t num_training_steps, double lr_init);

}  // namespace zero::optim
