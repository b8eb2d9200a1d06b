// DeepSpeed's LR schedules (runtime/lr_schedules.py) with their exact formulas and the
// last_batch_iteration offset, plus "no scheduler" (the optimizer's constant lr) and HF Trainer's
// schedules (--lr_scheduler_type without a scheduler block; hf_lr_schedule.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "optim/hf_lr_schedule.h"

namespace zero::optim {

enum class LrScheduleKind {
  kConstant,
  kLRRangeTest,
  kOneCycle,
  kWarmupLR,
  kWarmupDecayLR,
  kWarmupCosineLR,
  kHuggingFace  // HF get_scheduler's LambdaLR: LrScheduleParams::hf
};
enum class WarmupType { kLog, kLinear };

struct Betas {
  double beta1;
  double beta2;
};

// All parameters of all schedules (only those of `kind` are meaningful), defaults as DeepSpeed's.
struct LrScheduleParams {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  double optimizer_lr = 1e-3;  // optimizer.params.lr: kConstant, and WarmupCosineLR's base
  // LRRangeTest
  double lr_range_test_min_lr = 1e-3;
  double lr_range_test_step_size = 2000;
  double lr_range_test_step_rate = 1.0;
  bool lr_range_test_staircase = false;
  // OneCycle
  double cycle_min_lr = 0, cycle_max_lr = 0;  // required
  double decay_lr_rate = 0;
  double cycle_first_step_size = 2000;
  double cycle_second_step_size = 2000;  // None in DeepSpeed = cycle_first_step_size
  double decay_step_size = 0;
  bool cycle_momentum = true;
  double cycle_min_mom = 0.8, cycle_max_mom = 0.9;
  double decay_mom_rate = 0;
  // WarmupLR / WarmupDecayLR / WarmupCosineLR
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 1e-3;
  int64_t warmup_num_steps = 1000;  // stored clamped to >= 2 like DeepSpeed
  WarmupType warmup_type = WarmupType::kLog;
  int64_t total_num_steps = 0;  // required by WarmupDecayLR and WarmupCosineLR
  double warmup_min_ratio = 0.0;
  double cos_min_ratio = 1e-4;
  // kHuggingFace (its lr_init is optimizer_lr)
  HfScheduleParams hf;
};

// A schedule: a pure function of the update number, plus the progress counter that is saved.
//
// Numbering (the one contract to remember): `update` is 1-based and counts SUCCESSFUL optimizer
// updates (steps skipped on overflow do not count, because DeepSpeed only calls
// scheduler.step() after a successful step). lr_at(u) is the lr used by the u-th successful update.
// DeepSpeed's last_batch_iteration while that update runs is t = u - 2: construction (t = -1)
// writes the lr of update 1, and each successful step() advances t by one before the next update.
// Hence WarmupLR's first TWO updates both run at warmup_min_lr.
// HF's schedules (LambdaLR, stepped by DeepSpeed after each successful update as under the HF
// Trainer) run update u at optimizer_lr * lambda(u - 1): update 1 uses lambda(0).
class LrSchedule {
 public:
  // Builds a schedule from `scheduler.type` (case-sensitive, as DeepSpeed) and
  // `scheduler.params`. Unknown params are INVALID_ARGUMENT (DeepSpeed: TypeError), missing
  // required ones name the key. `optimizer_lr` is optimizer.params.lr.
  static StatusOr<LrSchedule> from_json(std::string_view type, const nlohmann::json& params,
                                        double optimizer_lr);
  // No `scheduler` block: every update uses the optimizer's lr.
  static LrSchedule constant(double optimizer_lr);
  static StatusOr<LrSchedule> from_params(const LrScheduleParams& params);
  // An HF schedule from hf_schedule_from_flags (the optimizer lr is hf.lr_init).
  static LrSchedule hugging_face(const HfScheduleParams& hf);
  // HF get_scheduler(name, ...) for --lr_scheduler_type: "constant" is constant(optimizer_lr),
  // the others hugging_face(hf_schedule_from_flags(...)). `kwargs_json` is the text of
  // --lr_scheduler_kwargs (empty: none).
  static StatusOr<LrSchedule> from_hf_flags(std::string_view name, std::string_view kwargs_json,
                                            int64_t num_warmup_steps, int64_t num_training_steps,
                                            double optimizer_lr);

  const LrScheduleParams& params() const { return params_; }
  std::string_view type_name() const;

  // The lr of the u-th successful update (u >= 1).
  double lr_at(int64_t update) const;
  // OneCycle with cycle_momentum: the (beta1, beta2) of the u-th update (beta2 is forced to 0.99,
  // as DeepSpeed does). nullopt for every other schedule: keep the optimizer's betas.
  std::optional<Betas> betas_at(int64_t update) const;

  // The formula at DeepSpeed's last_batch_iteration t (t >= -1); lr_at(u) = lr_at_iteration(u-2)
  // except where DeepSpeed's constructor writes something else than get_lr() at t = -1.
  double lr_at_iteration(int64_t t) const;

  // Progress: successful updates so far. The next update is number completed_updates() + 1.
  int64_t completed_updates() const { return completed_updates_; }
  double next_lr() const { return lr_at(completed_updates_ + 1); }
  std::optional<Betas> next_betas() const { return betas_at(completed_updates_ + 1); }
  // Call after each successful (non-skipped) optimizer update.
  void on_successful_update() { ++completed_updates_; }

  // {"type", "last_batch_iteration"}: DeepSpeed's t after the completed updates (for HF schedules
  // too: type is the HF name, e.g. "cosine"; LambdaLR's last_epoch is last_batch_iteration + 1).
  nlohmann::json state() const;
  // Restores progress; the type must match (params may differ: DeepSpeed also keeps the ones
  // given at construction and only restores last_batch_iteration).
  Status restore(const nlohmann::json& state);

 private:
  explicit LrSchedule(const LrScheduleParams& params) : params_(params) {}
  double one_cycle_scale(int64_t t) const;

  LrScheduleParams params_;
  int64_t completed_updates_ = 0;
};

}  // namespace zero::optim
