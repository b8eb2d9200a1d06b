// HF get_scheduler's LambdaLR multipliers (transformers/optimization.py) and their kwargs.
#include "optim/hf_lr_schedule.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <numbers>
#include <set>
#include <string>

namespace zero::optim {

namespace {

using nlohmann::json;

struct HfName {
  HfScheduleType type;
  std::string_view name;
};
constexpr std::array<HfName, 8> kHfNames = {{
    {HfScheduleType::kLinear, "linear"},
    {HfScheduleType::kCosine, "cosine"},
    {HfScheduleType::kCosineWithRestarts, "cosine_with_restarts"},
    {HfScheduleType::kPolynomial, "polynomial"},
    {HfScheduleType::kConstantWithWarmup, "constant_with_warmup"},
    {HfScheduleType::kInverseSqrt, "inverse_sqrt"},
    {HfScheduleType::kCosineWithMinLr, "cosine_with_min_lr"},
    {HfScheduleType::kWarmupStableDecay, "warmup_stable_decay"},
}};

constexpr double kPi = std::numbers::pi;

// The linear warmup every HF schedule starts with: step / max(1, warmup).
double linear_warmup(int64_t step, int64_t warmup) {
  return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup));
}

// Fraction of the post-warmup span done at `step` (HF's `progress`).
double decay_progress(int64_t step, int64_t warmup, int64_t total) {
  return static_cast<double>(step - warmup) /
         static_cast<double>(std::max<int64_t>(1, total - warmup));
}

double wsd_lambda(const HfScheduleParams& p, int64_t step) {
  const int64_t warm = p.num_warmup_steps, stable = p.num_stable_steps, decay = p.num_decay_steps;
  if (step < warm) {
    const double progress = linear_warmup(step, warm);
    double factor = progress;
    if (p.warmup_shape == WsdShape::kCosine) factor = 0.5 * (1.0 - std::cos(kPi * progress));
    if (p.warmup_shape == WsdShape::kOneMinusSqrt) factor = 1.0 - std::sqrt(1.0 - progress);
    return std::max(0.0, factor * (1.0 - p.min_lr_ratio) + p.min_lr_ratio);
  }
  if (step < warm + stable) return 1.0;
  if (step < warm + stable + decay) {
    const double progress = static_cast<double>(step - warm - stable) /
                            static_cast<double>(std::max<int64_t>(1, decay));
    double factor = 1.0 - progress;
    if (p.decay_shape == WsdShape::kCosine) {
      factor = 0.5 * (1.0 + std::cos(kPi * p.num_cycles * 2.0 * progress));
    }
    if (p.decay_shape == WsdShape::kOneMinusSqrt) factor = 1.0 - std::sqrt(progress);
    return std::max(0.0, factor * (1.0 - p.min_lr_ratio) + p.min_lr_ratio);
  }
  return p.min_lr_ratio;
}

// --lr_scheduler_kwargs read as the keyword arguments of one schedule function. Strings that
// spell a number are numbers, as TrainingArguments' _convert_str_dict makes them.
class KwargReader {
 public:
  KwargReader(const json& kwargs, std::string_view type) : kwargs_(kwargs), type_(type) {}

  bool has(const char* key) const { return kwargs_.contains(key); }

  Status number(const char* key, double* out) {
    seen_.insert(key);
    auto it = kwargs_.find(key);
    if (it == kwargs_.end()) return ok_status();
    const json& v = *it;
    bool ok = v.is_number() && !v.is_boolean();
    if (ok) {
      *out = v.get<double>();
    } else if (v.is_string() && numeric_string(v.get<std::string>())) {
      *out = std::stod(v.get<std::string>());
      ok = true;
    }
    if (!ok || !std::isfinite(*out)) {
      return invalid_argument("--lr_scheduler_kwargs: {} of {} must be a finite number, got {}",
                              key, type_, v.dump());
    }
    return ok_status();
  }
  Status integer(const char* key, int64_t* out) {
    double value = static_cast<double>(*out);
    ZERO_RETURN_IF_ERROR(number(key, &value));
    if (value != std::floor(value) || std::fabs(value) > 9.0e15) {
      return invalid_argument("--lr_scheduler_kwargs: {} of {} must be an integer, got {}", key,
                              type_, value);
    }
    *out = static_cast<int64_t>(value);
    return ok_status();
  }
  Status shape(const char* key, WsdShape* out) {
    seen_.insert(key);
    auto it = kwargs_.find(key);
    if (it == kwargs_.end()) return ok_status();
    const std::string s = it->is_string() ? it->get<std::string>() : it->dump();
    if (s == "linear") {
      *out = WsdShape::kLinear;
    } else if (s == "cosine") {
      *out = WsdShape::kCosine;
    } else if (s == "1-sqrt") {
      *out = WsdShape::kOneMinusSqrt;
    } else {
      return invalid_argument(
          "--lr_scheduler_kwargs: {} of {} must be \"linear\", \"cosine\" or \"1-sqrt\", got {}",
          key, type_, it->dump());
    }
    return ok_status();
  }
  // After all reads: a key the schedule function does not take is an error (HF: TypeError).
  Status finish() const {
    for (const auto& [key, value] : kwargs_.items()) {
      if (seen_.contains(key)) continue;
      if (key == "last_epoch") {
        return unimplemented(
            "--lr_scheduler_kwargs: last_epoch is not supported; resume from a checkpoint to "
            "continue a schedule");
      }
      if (seen_.empty()) {
        return invalid_argument(
            "--lr_scheduler_kwargs: {} takes no arguments (HF's get_scheduler passes none to it), "
            "got {}",
            type_, key);
      }
      std::string names;
      for (const auto& s : seen_) names += (names.empty() ? "" : ", ") + s;
      return invalid_argument("--lr_scheduler_kwargs: {} is not an argument of {} (known: {})", key,
                              type_, names);
    }
    return ok_status();
  }

 private:
  // Python's str.isdigit() or str.replace(".", "", 1).isdigit().
  static bool numeric_string(const std::string& s) {
    if (s.empty()) return false;
    int dots = 0;
    for (char c : s) {
      if (c == '.') {
        if (++dots > 1) return false;
      } else if (!std::isdigit(static_cast<unsigned char>(c))) {
        return false;
      }
    }
    return s.size() > static_cast<size_t>(dots);
  }

  const json& kwargs_;
  std::string_view type_;
  std::set<std::string> seen_;
};

}  // namespace

std::string_view hf_schedule_name(HfScheduleType type) {
  for (const auto& n : kHfNames) {
    if (n.type == type) return n.name;
  }
  return "?";
}

bool hf_schedule_uses_total(std::string_view name) {
  return name == "linear" || name == "cosine" || name == "cosine_with_restarts" ||
         name == "polynomial" || name == "cosine_with_min_lr" || name == "warmup_stable_decay";
}

double hf_lr_lambda(const HfScheduleParams& p, int64_t step) {
  const int64_t warm = p.num_warmup_steps, total = p.num_training_steps;
  switch (p.type) {
    case HfScheduleType::kLinear:
      if (step < warm) return linear_warmup(step, warm);
      return std::max(0.0, static_cast<double>(total - step) /
                               static_cast<double>(std::max<int64_t>(1, total - warm)));
    case HfScheduleType::kCosine:
      if (step < warm) return linear_warmup(step, warm);
      return std::max(0.0, 0.5 * (1.0 + std::cos(kPi * p.num_cycles * 2.0 *
                                                 decay_progress(step, warm, total))));
    case HfScheduleType::kCosineWithRestarts: {
      if (step < warm) return linear_warmup(step, warm);
      const double progress = decay_progress(step, warm, total);
      if (progress >= 1.0) return 0.0;
      // progress >= 0 here, so Python's % is fmod.
      return std::max(0.0, 0.5 * (1.0 + std::cos(kPi * std::fmod(p.num_cycles * progress, 1.0))));
    }
    case HfScheduleType::kPolynomial: {
      if (step < warm) return linear_warmup(step, warm);
      const int64_t decay_steps = total - warm;
      // HF divides by zero at step == warmup == total; that step is past the run's end here.
      if (step > total || decay_steps == 0) return p.lr_end / p.lr_init;
      const double pct_remaining =
          1.0 - static_cast<double>(step - warm) / static_cast<double>(decay_steps);
      const double decayed = (p.lr_init - p.lr_end) * std::pow(pct_remaining, p.power) + p.lr_end;
      return decayed / p.lr_init;
    }
    case HfScheduleType::kConstantWithWarmup:
      if (step < warm) return linear_warmup(step, warm);
      return 1.0;
    case HfScheduleType::kInverseSqrt: {
      if (step < warm) return linear_warmup(step, warm);
      const double shift = static_cast<double>(p.timescale - warm);
      return 1.0 /
             std::sqrt((static_cast<double>(step) + shift) / static_cast<double>(p.timescale));
    }
    case HfScheduleType::kCosineWithMinLr: {
      if (step < warm) return linear_warmup(step, warm);
      const double cosine =
          0.5 * (1.0 + std::cos(kPi * p.num_cycles * 2.0 * decay_progress(step, warm, total)));
      return std::max(0.0, cosine * (1.0 - p.min_lr_rate) + p.min_lr_rate);
    }
    case HfScheduleType::kWarmupStableDecay: return wsd_lambda(p, step);
  }
  return 1.0;
}

namespace {

// The schedule's own --lr_scheduler_kwargs into `p` (whose type and step counts are set), as HF's
// get_scheduler reads them, with the checks HF makes (or fails on later).
Status read_schedule_kwargs(KwargReader& r, int64_t num_warmup_steps, int64_t num_training_steps,
                            double lr_init, HfScheduleParams& p) {
  switch (p.type) {
    case HfScheduleType::kLinear:
    case HfScheduleType::kConstantWithWarmup: break;
    case HfScheduleType::kInverseSqrt:
      p.timescale = num_warmup_steps > 0 ? num_warmup_steps : 10000;  // HF: warmup or 10_000
      break;
    case HfScheduleType::kCosine:
      ZERO_RETURN_IF_ERROR(r.number("num_cycles", &p.num_cycles));
      break;
    case HfScheduleType::kCosineWithRestarts:
      p.num_cycles = 1;
      ZERO_RETURN_IF_ERROR(r.number("num_cycles", &p.num_cycles));
      break;
    case HfScheduleType::kPolynomial:
      ZERO_RETURN_IF_ERROR(r.number("lr_end", &p.lr_end));
      ZERO_RETURN_IF_ERROR(r.number("power", &p.power));
      if (!(lr_init > p.lr_end)) {
        return invalid_argument(
            "--lr_scheduler_type polynomial: lr_end ({}) must be smaller than the initial lr ({})",
            p.lr_end, lr_init);
      }
      break;
    case HfScheduleType::kCosineWithMinLr: {
      ZERO_RETURN_IF_ERROR(r.number("num_cycles", &p.num_cycles));
      const bool has_lr = r.has("min_lr"), has_rate = r.has("min_lr_rate");
      double min_lr = 0;
      ZERO_RETURN_IF_ERROR(r.number("min_lr", &min_lr));
      ZERO_RETURN_IF_ERROR(r.number("min_lr_rate", &p.min_lr_rate));
      if (has_lr == has_rate) {
        return invalid_argument(
            "--lr_scheduler_kwargs: cosine_with_min_lr needs exactly one of min_lr and "
            "min_lr_rate");
      }
      if (has_lr) {
        if (!(lr_init > 0)) {
          return invalid_argument(
              "--lr_scheduler_kwargs: min_lr needs a learning rate > 0 (use min_lr_rate)");
        }
        p.min_lr_rate = min_lr / lr_init;
      }
      break;
    }
    case HfScheduleType::kWarmupStableDecay: {
      if (!r.has("num_decay_steps")) {
        return invalid_argument(
            "--lr_scheduler_type warmup_stable_decay needs --lr_scheduler_kwargs "
            "'{{\"num_decay_steps\": N}}'");
      }
      ZERO_RETURN_IF_ERROR(r.integer("num_decay_steps", &p.num_decay_steps));
      const bool has_stable = r.has("num_stable_steps");
      ZERO_RETURN_IF_ERROR(r.integer("num_stable_steps", &p.num_stable_steps));
      ZERO_RETURN_IF_ERROR(r.shape("warmup_type", &p.warmup_shape));
      ZERO_RETURN_IF_ERROR(r.shape("decay_type", &p.decay_shape));
      ZERO_RETURN_IF_ERROR(r.number("min_lr_ratio", &p.min_lr_ratio));
      ZERO_RETURN_IF_ERROR(r.number("num_cycles", &p.num_cycles));
      // HF: num_stable_steps wins over num_training_steps when given.
      if (!has_stable)
        p.num_stable_steps = num_training_steps - num_warmup_steps - p.num_decay_steps;
      if (p.num_decay_steps < 0 || p.num_stable_steps < 0) {
        return invalid_argument(
            "--lr_scheduler_type warmup_stable_decay: {} warmup + {} decay steps exceed the {} "
            "training steps (the stable phase would be {} steps)",
            num_warmup_steps, p.num_decay_steps, num_training_steps, p.num_stable_steps);
      }
      break;
    }
  }
  return ok_status();
}

}  // namespace

StatusOr<HfScheduleParams> hf_schedule_from_flags(std::string_view name, const json& kwargs_in,
                                                  int64_t num_warmup_steps,
                                                  int64_t num_training_steps, double lr_init) {
  const json kwargs = kwargs_in.is_null() ? json::object() : kwargs_in;
  if (!kwargs.is_object()) {
    return invalid_argument("--lr_scheduler_kwargs: expected a JSON object, got {}", kwargs.dump());
  }
  if (name == "reduce_lr_on_plateau") {
    return unimplemented(
        "--lr_scheduler_type reduce_lr_on_plateau needs evaluation metrics, which zero train "
        "does not compute");
  }
  auto found = std::find_if(kHfNames.begin(), kHfNames.end(),
                            [&](const HfName& n) { return n.name == name; });
  if (found == kHfNames.end()) {
    return invalid_argument(
        "--lr_scheduler_type {}: expected linear, cosine, cosine_with_restarts, polynomial, "
        "constant, constant_with_warmup, inverse_sqrt, cosine_with_min_lr or "
        "warmup_stable_decay",
        name);
  }
  if (num_warmup_steps < 0) {
    return invalid_argument("--lr_scheduler_type {}: warmup steps must be >= 0, got {}", name,
                            num_warmup_steps);
  }
  HfScheduleParams p;
  p.type = found->type;
  p.num_warmup_steps = num_warmup_steps;
  p.num_training_steps = num_training_steps;
  p.lr_init = lr_init;
  KwargReader r(kwargs, name);
  ZERO_RETURN_IF_ERROR(read_schedule_kwargs(r, num_warmup_steps, num_training_steps, lr_init, p));
  ZERO_RETURN_IF_ERROR(r.finish());
  const bool needs_total = p.type != HfScheduleType::kConstantWithWarmup &&
                           p.type != HfScheduleType::kInverseSqrt &&
                           p.type != HfScheduleType::kWarmupStableDecay;
  if (needs_total && num_training_steps <= 0) {
    return invalid_argument("--lr_scheduler_type {} needs the number of training steps > 0, got {}",
                            name, num_training_steps);
  }
  return p;
}

}  // namespace zero::optim
