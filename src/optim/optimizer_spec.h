// The `optimizer` block of ds_config, resolved to what our update functions need, with DeepSpeed's
// type names, parameter names and defaults (engine._configure_basic_optimizer).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "optim/adam.h"
#include "optim/lamb.h"

namespace zero::optim {

enum class OptimizerKind { kAdam, kLamb };

// Resolved hyper-parameters. Betas/eps/lr stay double here (the config's precision); the update
// structs take float, like DeepSpeed's kernels.
struct OptimizerSpec {
  OptimizerKind kind = OptimizerKind::kAdam;
  std::string type_name;  // lower-cased DeepSpeed name: "adam", "adamw" or "lamb"
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // for decaying groups; no-decay groups use 0 (weight_decay.h)
  bool bias_correction = true;
  // Adam only. Type "adamw" forces true; type "adam" defaults to true (so "Adam" means AdamW
  // unless the params say adam_w_mode: false).
  bool adam_w_mode = true;
  bool torch_adam = false;  // accepted and recorded; torch.optim.Adam(W) is the same math
  // Lamb only.
  double max_coeff = 10.0;
  double min_coeff = 0.01;
  bool eps_inside_sqrt = false;

  // Update arguments for one step of a group with the given lr (from the schedule), step counter
  // and weight decay (0 for no-decay groups). OneCycle's momentum cycling overrides beta1/beta2
  // of the returned struct (LrSchedule::betas_at).
  AdamArgs adam_args(double step_lr, int64_t step, double group_weight_decay) const;
  LambArgs lamb_args(double step_lr, int64_t step, double group_weight_decay) const;
};

// Parses `optimizer.type` and `optimizer.params`. Types are matched case-insensitively like
// DeepSpeed ("Adam", "AdamW", "Lamb"); params are matched exactly (DeepSpeed passes them as Python
// kwargs, so an unknown key is a TypeError there and an INVALID_ARGUMENT here). Errors:
//  - max_grad_norm in params (DeepSpeed's ValueError: use top-level gradient_clipping);
//  - amsgrad: true (unsupported, as in FusedAdam / DeepSpeedCPUAdam / FusedLamb);
//  - other DeepSpeed optimizers (OneBitAdam, Adagrad, Lion, ...) are UNIMPLEMENTED;
//  - anything else (DeepSpeed would try torch.optim.<type>) is INVALID_ARGUMENT;
//  - out-of-range values (lr < 0, eps < 0, betas outside [0, 1), weight_decay < 0,
//    min_coeff > max_coeff): stricter than FusedAdam, which does not check.
StatusOr<OptimizerSpec> optimizer_spec_from_json(std::string_view type,
                                                 const nlohmann::json& params);

nlohmann::json optimizer_spec_to_json(const OptimizerSpec& spec);

}  // namespace zero::optim
