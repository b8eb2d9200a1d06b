// Loss scaling with DeepSpeed's semantics (runtime/fp16/loss_scaler.py): dynamic fp16 scaling with
// window, hysteresis and consecutive_hysteresis; static fp16 scale; none (bf16 / fp32: scale 1).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace zero::optim {

enum class LossScaleMode {
  kNone,     // bf16 / fp32: scale 1. We still skip non-finite steps (DeepSpeed does not check).
  kStatic,   // fp16 with loss_scale > 0: fixed scale, overflow steps are skipped.
  kDynamic,  // fp16 with loss_scale == 0.
};

struct LossScalerConfig {
  LossScaleMode mode = LossScaleMode::kNone;
  double initial_scale = 1.0;  // 2^initial_scale_power (dynamic) or loss_scale (static)
  double scale_factor = 2.0;
  int64_t scale_window = 1000;
  int64_t hysteresis = 1;  // DeepSpeed's delayed_shift
  bool consecutive_hysteresis = false;
  double min_scale = 1.0;
  bool raise_error_at_min_scale = true;  // DeepSpeed's default; no config key sets it
};

// The `fp16` block -> scaler config. With fp16 disabled (or absent) the mode is kNone.
// DeepSpeed's quirk is kept: the documented dynamic defaults (2^16, hysteresis 2) apply only when
// at least one of initial_scale_power, loss_scale_window, min_loss_scale, hysteresis,
// consecutive_hysteresis is present; a block with only "enabled" gets DynamicLossScaler()'s own
// defaults: scale 2^32, window 1000, min 1, hysteresis 1.
StatusOr<LossScalerConfig> loss_scaler_config_from_fp16_json(const nlohmann::json& fp16_block);

// What one update_scale() call did; feeds overflow_log_line().
struct LossScaleUpdate {
  bool overflow = false;
  double prev_scale = 1.0;
  double new_scale = 1.0;
  int64_t prev_hysteresis = 1;
  int64_t new_hysteresis = 1;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& config);

  const LossScalerConfig& config() const { return config_; }
  double scale() const { return cur_scale_; }
  int64_t hysteresis() const { return cur_hysteresis_; }

  // Feeds the overflow verdict of one optimizer step (after all reductions), exactly
  // DeepSpeed's DynamicLossScaler.update_scale:
  //  overflow: if hysteresis == 1 (or the configured one is 1): at min scale -> error, else
  //            scale = max(scale / factor, min); otherwise hysteresis -= 1. last_overflow = iter.
  //  clean:    consecutive_hysteresis -> hysteresis refilled; every scale_window clean steps since
  //            the last overflow: scale *= factor (and hysteresis refilled if not consecutive).
  //  iter += 1.
  // Static / none: the scale never changes. Returns FAILED_PRECONDITION with DeepSpeed's message
  // when an overflow happens at the minimum scale (the run should stop).
  StatusOr<LossScaleUpdate> update(bool overflow);

  // {"cur_scale", "cur_iter", "last_overflow_iter", "cur_hysteresis"} (+ the config for checks).
  nlohmann::json state() const;
  Status restore(const nlohmann::json& state);

 private:
  LossScalerConfig config_;
  double cur_scale_;
  int64_t cur_iter_ = 0;
  int64_t last_overflow_iter_ = -1;
  int64_t cur_hysteresis_;
};

// DeepSpeed's rank-0 log line for a skipped fp16 step, e.g.
//   "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768"
//   "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, but hysteresis is 2.
//    Reducing hysteresis to 1" (one line).
// Scales print as Python's int() (truncated). For static / none scaling (where DeepSpeed's scaler
// prints nothing) only the first sentence is produced.
std::string overflow_log_line(int rank, LossScaleMode mode, const LossScaleUpdate& update);

// DeepSpeed's exception text for an overflow at the minimum scale.
inline constexpr const char* kMinScaleErrorMessage =
    "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.";

}  // namespace zero::optim
