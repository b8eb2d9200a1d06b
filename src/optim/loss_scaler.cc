// Loss scaler state machine and the fp16-block parsing (semantics in loss_scaler.h).
#include "optim/loss_scaler.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

namespace zero::optim {

using nlohmann::json;

namespace {

Status read_number(const json& block, const char* key, double* out) {
  auto it = block.find(key);
  if (it == block.end()) return ok_status();
  if (!it->is_number() || it->is_boolean()) {
    return invalid_argument("fp16.{}: expected a number, got {}", key, it->dump());
  }
  *out = it->get<double>();
  return ok_status();
}

}  // namespace

StatusOr<LossScalerConfig> loss_scaler_config_from_fp16_json(const json& block) {
  LossScalerConfig c;
  if (block.is_null()) return c;
  if (!block.is_object()) return invalid_argument("fp16: expected an object, got {}", block.dump());
  bool enabled = false;
  if (auto it = block.find("enabled"); it != block.end()) {
    if (!it->is_boolean()) {
      return invalid_argument("fp16.enabled: expected true or false, got {}", it->dump());
    }
    enabled = it->get<bool>();
  }
  if (!enabled) return c;

  double loss_scale = 0;
  ZERO_RETURN_IF_ERROR(read_number(block, "loss_scale", &loss_scale));
  if (loss_scale < 0) return invalid_argument("fp16.loss_scale must be >= 0, got {}", loss_scale);
  if (loss_scale > 0) {
    c.mode = LossScaleMode::kStatic;
    c.initial_scale = loss_scale;
    return c;
  }
  c.mode = LossScaleMode::kDynamic;
  static constexpr std::array<const char*, 5> kDynamicKeys = {
      "initial_scale_power", "loss_scale_window", "min_loss_scale", "hysteresis",
      "consecutive_hysteresis"};
  const bool any_dynamic_key = std::any_of(kDynamicKeys.begin(), kDynamicKeys.end(),
                                           [&](const char* k) { return block.contains(k); });
  if (!any_dynamic_key) {
    c.initial_scale = std::ldexp(1.0, 32);  // DynamicLossScaler() defaults, not the documented ones
    c.scale_window = 1000;
    c.min_scale = 1.0;
    c.hysteresis = 1;
    return c;
  }
  double power = 16, window = 1000, hysteresis = 2, min_scale = 1;
  ZERO_RETURN_IF_ERROR(read_number(block, "initial_scale_power", &power));
  ZERO_RETURN_IF_ERROR(read_number(block, "loss_scale_window", &window));
  ZERO_RETURN_IF_ERROR(read_number(block, "hysteresis", &hysteresis));
  ZERO_RETURN_IF_ERROR(read_number(block, "min_loss_scale", &min_scale));
  if (auto it = block.find("consecutive_hysteresis"); it != block.end()) {
    if (!it->is_boolean()) {
      return invalid_argument("fp16.consecutive_hysteresis: expected true or false, got {}",
                              it->dump());
    }
    c.consecutive_hysteresis = it->get<bool>();
  }
  // Stricter than DeepSpeed, where e.g. a window of 0 raises ZeroDivisionError mid-run.
  if (window < 1 || window != std::floor(window)) {
    return invalid_argument("fp16.loss_scale_window must be an integer >= 1, got {}", window);
  }
  if (hysteresis < 1 || hysteresis != std::floor(hysteresis)) {
    return invalid_argument("fp16.hysteresis must be an integer >= 1, got {}", hysteresis);
  }
  if (!(min_scale > 0))
    return invalid_argument("fp16.min_loss_scale must be > 0, got {}", min_scale);
  if (!(power >= -126 && power <= 127)) {
    return invalid_argument("fp16.initial_scale_power out of range: {}", power);
  }
  c.initial_scale = std::pow(2.0, power);
  c.scale_window = static_cast<int64_t>(window);
  c.hysteresis = static_cast<int64_t>(hysteresis);
  c.min_scale = min_scale;
  return c;
}

LossScaler::LossScaler(const LossScalerConfig& config)
    : config_(config), cur_scale_(config.initial_scale), cur_hysteresis_(config.hysteresis) {
  if (config_.mode == LossScaleMode::kNone) cur_scale_ = 1.0;
}

StatusOr<LossScaleUpdate> LossScaler::update(bool overflow) {
  LossScaleUpdate u;
  u.overflow = overflow;
  u.prev_scale = cur_scale_;
  u.prev_hysteresis = cur_hysteresis_;
  if (config_.mode != LossScaleMode::kDynamic) {
    u.new_scale = cur_scale_;
    u.new_hysteresis = cur_hysteresis_;
    return u;
  }
  if (overflow) {
    if (config_.hysteresis == 1 || cur_hysteresis_ == 1) {
      if (cur_scale_ == config_.min_scale && config_.raise_error_at_min_scale) {
        return failed_precondition(
            "{} (fp16 loss scale {} = min_loss_scale; consider bf16, a "
            "lower learning rate or a lower min_loss_scale)",
            kMinScaleErrorMessage, cur_scale_);
      }
      cur_scale_ = std::max(cur_scale_ / config_.scale_factor, config_.min_scale);
    } else {
      cur_hysteresis_ -= 1;
    }
    last_overflow_iter_ = cur_iter_;
  } else {
    if (config_.consecutive_hysteresis) cur_hysteresis_ = config_.hysteresis;
    if ((cur_iter_ - last_overflow_iter_) % config_.scale_window == 0) {
      if (!config_.consecutive_hysteresis) cur_hysteresis_ = config_.hysteresis;
      cur_scale_ *= config_.scale_factor;
    }
  }
  cur_iter_ += 1;
  u.new_scale = cur_scale_;
  u.new_hysteresis = cur_hysteresis_;
  return u;
}

json LossScaler::state() const {
  return {{"cur_scale", cur_scale_},
          {"cur_iter", cur_iter_},
          {"last_overflow_iter", last_overflow_iter_},
          {"cur_hysteresis", cur_hysteresis_},
          {"dynamic", config_.mode == LossScaleMode::kDynamic}};
}

Status LossScaler::restore(const json& state) {
  const char* kKeys[] = {"cur_scale", "cur_iter", "last_overflow_iter", "cur_hysteresis"};
  for (const char* key : kKeys) {
    if (!state.is_object() || !state.contains(key) || !state[key].is_number()) {
      return invalid_argument("loss scaler state: missing or non-numeric \"{}\" in {}", key,
                              state.dump());
    }
  }
  if (config_.mode == LossScaleMode::kNone) return ok_status();  // scale stays 1
  if (config_.mode == LossScaleMode::kStatic) {
    // The config's static scale wins (DeepSpeed keeps the pickled scaler; the value is the same
    // unless the config changed, and then the new config is what the user asked for).
    return ok_status();
  }
  cur_scale_ = state["cur_scale"].get<double>();
  cur_iter_ = state["cur_iter"].get<int64_t>();
  last_overflow_iter_ = state["last_overflow_iter"].get<int64_t>();
  cur_hysteresis_ = state["cur_hysteresis"].get<int64_t>();
  if (!(cur_scale_ > 0) || cur_hysteresis_ < 0) {
    return invalid_argument("loss scaler state: invalid values in {}", state.dump());
  }
  return ok_status();
}

std::string overflow_log_line(int rank, LossScaleMode mode, const LossScaleUpdate& u) {
  std::string line = fmt::format("[deepspeed] OVERFLOW! Rank {} Skipping step.", rank);
  if (mode != LossScaleMode::kDynamic) return line;
  // Python's int(float) truncates toward zero.
  const auto as_int = [](double x) { return static_cast<long long>(std::trunc(x)); };
  if (u.new_hysteresis < u.prev_hysteresis) {
    line +=
        fmt::format(" Attempted loss scale: {}, but hysteresis is {}. Reducing hysteresis to {}",
                    as_int(u.prev_scale), u.prev_hysteresis, u.prev_hysteresis - 1);
  } else {
    line += fmt::format(" Attempted loss scale: {}, reducing to {}", as_int(u.prev_scale),
                        as_int(u.new_scale));
  }
  return line;
}

}  // namespace zero::optim
