// DeepSpeed LR schedule formulas and their parsing (see lr_schedule.h for the step numbering).
#include "optim/lr_schedule.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <numbers>
#include <set>
#include <utility>

#include "core/check.h"

namespace zero::optim {

namespace {

using nlohmann::json;

struct TypeName {
  LrScheduleKind kind;
  std::string_view name;
};
constexpr std::array<TypeName, 5> kTypeNames = {{
    {LrScheduleKind::kLRRangeTest, "LRRangeTest"},
    {LrScheduleKind::kOneCycle, "OneCycle"},
    {LrScheduleKind::kWarmupLR, "WarmupLR"},
    {LrScheduleKind::kWarmupDecayLR, "WarmupDecayLR"},
    {LrScheduleKind::kWarmupCosineLR, "WarmupCosineLR"},
}};

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// Reads scheduler.params as kwargs: every key must be known, types are checked.
class ParamReader {
 public:
  ParamReader(const json& params, std::string_view type) : params_(params), type_(type) {}

  Status number(const char* key, double* out, bool required = false) {
    seen_.insert(key);
    auto it = params_.find(key);
    if (it == params_.end()) {
      if (required) {
        return invalid_argument("scheduler.params.{} is required by scheduler {}", key, type_);
      }
      return ok_status();
    }
    if (it->is_array()) {
      return unimplemented(
          "scheduler.params.{}: per-param-group lists are not supported; give "
          "one number",
          key);
    }
    if (!it->is_number() || it->is_boolean()) {
      return invalid_argument("scheduler.params.{}: expected a number, got {}", key, it->dump());
    }
    *out = it->get<double>();
    if (!std::isfinite(*out)) {
      return invalid_argument("scheduler.params.{}: must be finite, got {}", key, *out);
    }
    return ok_status();
  }
  Status integer(const char* key, int64_t* out, bool required = false) {
    double value = static_cast<double>(*out);
    ZERO_RETURN_IF_ERROR(number(key, &value, required));
    if (value != std::floor(value)) {
      return invalid_argument("scheduler.params.{}: expected an integer, got {}", key, value);
    }
    *out = static_cast<int64_t>(value);
    return ok_status();
  }
  Status boolean(const char* key, bool* out) {
    seen_.insert(key);
    auto it = params_.find(key);
    if (it == params_.end()) return ok_status();
    if (!it->is_boolean()) {
      return invalid_argument("scheduler.params.{}: expected true or false, got {}", key,
                              it->dump());
    }
    *out = it->get<bool>();
    return ok_status();
  }
  // DeepSpeed warns and falls back to "log" on an unknown warmup_type; a typo silently changing
  // the schedule is an error here.
  Status warmup_type(WarmupType* out) {
    seen_.insert("warmup_type");
    auto it = params_.find("warmup_type");
    if (it == params_.end()) return ok_status();
    if (it->is_string() && it->get<std::string>() == "log") {
      *out = WarmupType::kLog;
    } else if (it->is_string() && it->get<std::string>() == "linear") {
      *out = WarmupType::kLinear;
    } else {
      return invalid_argument(
          "scheduler.params.warmup_type: expected \"log\" or \"linear\", got {}", it->dump());
    }
    return ok_status();
  }
  // Keys DeepSpeed accepts but that change nothing for us.
  void ignore(const char* key) { seen_.insert(key); }

  // After all reads: unknown keys, and last_batch_iteration other than -1.
  Status finish() {
    auto it = params_.find("last_batch_iteration");
    if (it != params_.end() && !(it->is_number_integer() && it->get<int64_t>() == -1)) {
      return unimplemented(
          "scheduler.params.last_batch_iteration: only -1 (start fresh) is supported; resume "
          "from a checkpoint to continue a schedule");
    }
    seen_.insert("last_batch_iteration");
    for (const auto& [key, value] : params_.items()) {
      if (!seen_.contains(key)) {
        std::string names;
        for (const auto& s : seen_) names += (names.empty() ? "" : ", ") + s;
        return invalid_argument(
            "scheduler.params.{}: unknown parameter for scheduler {} (known: {})", key, type_,
            names);
      }
    }
    return ok_status();
  }

 private:
  const json& params_;
  std::string_view type_;
  std::set<std::string> seen_;
};

Status read_warmup(ParamReader& r, LrScheduleParams* p) {
  ZERO_RETURN_IF_ERROR(r.integer("warmup_num_steps", &p->warmup_num_steps));
  ZERO_RETURN_IF_ERROR(r.warmup_type(&p->warmup_type));
  return ok_status();
}

double warmup_fraction(WarmupType type, int64_t t, int64_t warmup_num_steps) {
  if (type == WarmupType::kLog) {
    // DeepSpeed multiplies by a precomputed 1/ln(n); keep the same rounding.
    const double inverse_log_warm_up = 1.0 / std::log(static_cast<double>(warmup_num_steps));
    return inverse_log_warm_up * std::log(static_cast<double>(t + 1));
  }
  return static_cast<double>(t) / static_cast<double>(warmup_num_steps);
}

}  // namespace

LrSchedule LrSchedule::constant(double optimizer_lr) {
  LrScheduleParams p;
  p.kind = LrScheduleKind::kConstant;
  p.optimizer_lr = optimizer_lr;
  return LrSchedule(p);
}

LrSchedule LrSchedule::hugging_face(const HfScheduleParams& hf) {
  LrScheduleParams p;
  p.kind = LrScheduleKind::kHuggingFace;
  p.optimizer_lr = hf.lr_init;
  p.hf = hf;
  return LrSchedule(p);
}

StatusOr<LrSchedule> LrSchedule::from_hf_flags(std::string_view name, std::string_view kwargs_json,
                                               int64_t num_warmup_steps, int64_t num_training_steps,
                                               double optimizer_lr) {
  json kwargs = json::object();
  if (!kwargs_json.empty()) {
    kwargs = json::parse(kwargs_json, nullptr, /*allow_exceptions=*/false);
    if (kwargs.is_discarded() || !kwargs.is_object()) {
      return invalid_argument("--lr_scheduler_kwargs: expected a JSON object, got '{}'",
                              kwargs_json);
    }
  }
  if (name == "constant") {
    // HF's get_scheduler passes constant nothing but the optimizer.
    if (!kwargs.empty()) {
      return invalid_argument(
          "--lr_scheduler_kwargs: constant takes no arguments (HF's get_scheduler passes none to "
          "it), got {}",
          kwargs.begin().key());
    }
    return constant(optimizer_lr);
  }
  ZERO_ASSIGN_OR_RETURN(
      HfScheduleParams hf,
      hf_schedule_from_flags(name, kwargs, num_warmup_steps, num_training_steps, optimizer_lr));
  return hugging_face(hf);
}

StatusOr<LrSchedule> LrSchedule::from_params(const LrScheduleParams& in) {
  LrScheduleParams p = in;
  p.warmup_num_steps = std::max<int64_t>(2, p.warmup_num_steps);  // DeepSpeed: max(2, n)
  switch (p.kind) {
    case LrScheduleKind::kLRRangeTest:
      if (!(p.lr_range_test_step_size > 0)) {
        return invalid_argument("scheduler.params.lr_range_test_step_size must be > 0, got {}",
                                p.lr_range_test_step_size);
      }
      break;
    case LrScheduleKind::kOneCycle:
      if (!(p.cycle_first_step_size > 0) || !(p.cycle_second_step_size >= 0)) {
        return invalid_argument(
            "scheduler.params: OneCycle needs cycle_first_step_size > 0 and "
            "cycle_second_step_size >= 0, got {} and {}",
            p.cycle_first_step_size, p.cycle_second_step_size);
      }
      if (!(p.decay_step_size >= 0)) {
        return invalid_argument("scheduler.params.decay_step_size must be >= 0, got {}",
                                p.decay_step_size);
      }
      break;
    case LrScheduleKind::kWarmupDecayLR:
    case LrScheduleKind::kWarmupCosineLR:
      if (p.total_num_steps <= 0) {
        return invalid_argument("scheduler.params.total_num_steps must be > 0, got {}",
                                p.total_num_steps);
      }
      break;
    default: break;
  }
  return LrSchedule(p);
}

StatusOr<LrSchedule> LrSchedule::from_json(std::string_view type, const json& params_in,
                                           double optimizer_lr) {
  const json params = params_in.is_null() ? json::object() : params_in;
  if (!params.is_object()) {
    return invalid_argument("scheduler.params: expected an object, got {}", params.dump());
  }
  LrScheduleParams p;
  p.optimizer_lr = optimizer_lr;
  auto found = std::find_if(kTypeNames.begin(), kTypeNames.end(),
                            [&](const TypeName& t) { return t.name == type; });
  if (found == kTypeNames.end()) {
    for (const auto& t : kTypeNames) {
      if (iequals(t.name, type)) {
        return invalid_argument(
            "scheduler.type \"{}\" is unknown (scheduler names are case-sensitive in DeepSpeed); "
            "did you mean \"{}\"?",
            type, t.name);
      }
    }
    return invalid_argument(
        "scheduler.type \"{}\" is not supported; use LRRangeTest, OneCycle, WarmupLR, "
        "WarmupDecayLR or WarmupCosineLR (torch.optim.lr_scheduler classes are not available)",
        type);
  }
  p.kind = found->kind;
  ParamReader r(params, type);
  switch (p.kind) {
    case LrScheduleKind::kLRRangeTest:
      ZERO_RETURN_IF_ERROR(r.number("lr_range_test_min_lr", &p.lr_range_test_min_lr));
      ZERO_RETURN_IF_ERROR(r.number("lr_range_test_step_size", &p.lr_range_test_step_size));
      ZERO_RETURN_IF_ERROR(r.number("lr_range_test_step_rate", &p.lr_range_test_step_rate));
      ZERO_RETURN_IF_ERROR(r.boolean("lr_range_test_staircase", &p.lr_range_test_staircase));
      break;
    case LrScheduleKind::kOneCycle: {
      ZERO_RETURN_IF_ERROR(r.number("cycle_min_lr", &p.cycle_min_lr, /*required=*/true));
      ZERO_RETURN_IF_ERROR(r.number("cycle_max_lr", &p.cycle_max_lr, /*required=*/true));
      ZERO_RETURN_IF_ERROR(r.number("decay_lr_rate", &p.decay_lr_rate));
      ZERO_RETURN_IF_ERROR(r.number("cycle_first_step_size", &p.cycle_first_step_size));
      p.cycle_second_step_size = p.cycle_first_step_size;
      if (params.contains("cycle_second_step_size") &&
          !params["cycle_second_step_size"].is_null()) {
        ZERO_RETURN_IF_ERROR(r.number("cycle_second_step_size", &p.cycle_second_step_size));
      }
      r.ignore("cycle_second_step_size");
      r.ignore("cycle_first_stair_count");  // stored but unused by DeepSpeed
      r.ignore("cycle_second_stair_count");
      ZERO_RETURN_IF_ERROR(r.number("decay_step_size", &p.decay_step_size));
      ZERO_RETURN_IF_ERROR(r.boolean("cycle_momentum", &p.cycle_momentum));
      ZERO_RETURN_IF_ERROR(r.number("cycle_min_mom", &p.cycle_min_mom));
      ZERO_RETURN_IF_ERROR(r.number("cycle_max_mom", &p.cycle_max_mom));
      ZERO_RETURN_IF_ERROR(r.number("decay_mom_rate", &p.decay_mom_rate));
      break;
    }
    case LrScheduleKind::kWarmupLR:
    case LrScheduleKind::kWarmupDecayLR:
      ZERO_RETURN_IF_ERROR(r.number("warmup_min_lr", &p.warmup_min_lr));
      ZERO_RETURN_IF_ERROR(r.number("warmup_max_lr", &p.warmup_max_lr));
      ZERO_RETURN_IF_ERROR(read_warmup(r, &p));
      if (p.kind == LrScheduleKind::kWarmupDecayLR) {
        ZERO_RETURN_IF_ERROR(r.integer("total_num_steps", &p.total_num_steps, /*required=*/true));
      }
      break;
    case LrScheduleKind::kWarmupCosineLR:
      ZERO_RETURN_IF_ERROR(r.integer("total_num_steps", &p.total_num_steps, /*required=*/true));
      ZERO_RETURN_IF_ERROR(r.number("warmup_min_ratio", &p.warmup_min_ratio));
      ZERO_RETURN_IF_ERROR(r.number("cos_min_ratio", &p.cos_min_ratio));
      ZERO_RETURN_IF_ERROR(read_warmup(r, &p));
      break;
    case LrScheduleKind::kConstant:
    case LrScheduleKind::kHuggingFace: break;
  }
  ZERO_RETURN_IF_ERROR(r.finish());
  return from_params(p);
}

std::string_view LrSchedule::type_name() const {
  if (params_.kind == LrScheduleKind::kHuggingFace) return hf_schedule_name(params_.hf.type);
  for (const auto& t : kTypeNames) {
    if (t.kind == params_.kind) return t.name;
  }
  return "constant";
}

double LrSchedule::one_cycle_scale(int64_t t) const {
  const double total_size = params_.cycle_first_step_size + params_.cycle_second_step_size;
  const double step_ratio = params_.cycle_first_step_size / total_size;
  const double batch_iteration = static_cast<double>(t + 1);
  const double cycle = std::floor(1.0 + batch_iteration / total_size);
  const double x = 1.0 + batch_iteration / total_size - cycle;
  return x <= step_ratio ? x / step_ratio : (x - 1.0) / (step_ratio - 1.0);
}

double LrSchedule::lr_at_iteration(int64_t t) const {
  ZERO_CHECK(t >= -1, "last_batch_iteration ", t, " < -1");
  const LrScheduleParams& p = params_;
  switch (p.kind) {
    case LrScheduleKind::kConstant: return p.optimizer_lr;
    case LrScheduleKind::kHuggingFace: return p.optimizer_lr * hf_lr_lambda(p.hf, t + 1);
    case LrScheduleKind::kLRRangeTest: {
      double interval = static_cast<double>(t + 1) / p.lr_range_test_step_size;
      if (p.lr_range_test_staircase) interval = std::floor(interval);
      return p.lr_range_test_min_lr * (1.0 + p.lr_range_test_step_rate * interval);
    }
    case LrScheduleKind::kOneCycle: {
      const double total_size = p.cycle_first_step_size + p.cycle_second_step_size;
      if (static_cast<double>(t) < total_size) {
        return p.cycle_min_lr + (p.cycle_max_lr - p.cycle_min_lr) * one_cycle_scale(t);
      }
      // Python's math.isclose(x, 0) with default tolerances is true only for exactly 0.
      if (p.decay_step_size == 0 || p.decay_lr_rate == 0) return p.cycle_min_lr;
      const double decay_interval = (static_cast<double>(t) - total_size + 1) / p.decay_step_size;
      return p.cycle_min_lr / (1.0 + p.decay_lr_rate * decay_interval);
    }
    case LrScheduleKind::kWarmupLR:
    case LrScheduleKind::kWarmupDecayLR: {
      if (t < 0) return p.warmup_min_lr;
      double gamma = 1.0;
      if (t < p.warmup_num_steps) {
        gamma = warmup_fraction(p.warmup_type, t, p.warmup_num_steps);
      } else if (p.kind == LrScheduleKind::kWarmupDecayLR) {
        gamma = std::max(
            0.0, static_cast<double>(p.total_num_steps - t) /
                     std::max(1.0, static_cast<double>(p.total_num_steps - p.warmup_num_steps)));
      }
      return p.warmup_min_lr + (p.warmup_max_lr - p.warmup_min_lr) * gamma;
    }
    case LrScheduleKind::kWarmupCosineLR: {
      if (t < 0) return 0.0;  // DeepSpeed's get_lr() before the first step()
      double ratio;
      if (t < p.warmup_num_steps) {
        ratio = p.warmup_min_ratio +
                warmup_fraction(p.warmup_type, t, p.warmup_num_steps) * (1.0 - p.warmup_min_ratio);
      } else {
        const double real_last_step = static_cast<double>(t - p.warmup_num_steps + 1);
        const double real_total_steps = static_cast<double>(p.total_num_steps - p.warmup_num_steps);
        if (real_total_steps == 0) {
          ratio = p.cos_min_ratio;  // DeepSpeed divides by zero here; use the end of the decay
        } else {
          const double cosine =
              (1.0 + std::cos(std::numbers::pi * real_last_step / real_total_steps)) / 2.0;
          ratio = std::max(0.0, p.cos_min_ratio + (1.0 - p.cos_min_ratio) * cosine);
        }
      }
      return p.optimizer_lr * ratio;
    }
  }
  return p.optimizer_lr;
}

double LrSchedule::lr_at(int64_t update) const {
  ZERO_CHECK(update >= 1, "lr_at: update numbers are 1-based, got ", update);
  return lr_at_iteration(update - 2);
}

std::optional<Betas> LrSchedule::betas_at(int64_t update) const {
  ZERO_CHECK(update >= 1, "betas_at: update numbers are 1-based, got ", update);
  const LrScheduleParams& p = params_;
  if (p.kind != LrScheduleKind::kOneCycle || !p.cycle_momentum) return std::nullopt;
  constexpr double kForcedBeta2 = 0.99;  // DeepSpeed's OneCycle writes (beta1, 0.99)
  // The constructor writes cycle_min_mom (not the formula's value at t = -1, which is max_mom).
  if (update == 1) return Betas{p.cycle_min_mom, kForcedBeta2};
  const int64_t t = update - 2;
  const double total_size = p.cycle_first_step_size + p.cycle_second_step_size;
  if (static_cast<double>(t) < total_size) {
    return Betas{p.cycle_max_mom - (p.cycle_max_mom - p.cycle_min_mom) * one_cycle_scale(t),
                 kForcedBeta2};
  }
  if (p.decay_step_size == 0 || p.decay_mom_rate == 0) return Betas{p.cycle_max_mom, kForcedBeta2};
  const double decay_interval = (static_cast<double>(t) - total_size + 1) / p.decay_step_size;
  return Betas{p.cycle_max_mom * (1.0 + p.decay_mom_rate * decay_interval), kForcedBeta2};
}

json LrSchedule::state() const {
  return {{"type", std::string(type_name())}, {"last_batch_iteration", completed_updates_ - 1}};
}

Status LrSchedule::restore(const json& state) {
  if (!state.is_object() || !state.contains("type") || !state["type"].is_string() ||
      !state.contains("last_batch_iteration") ||
      !state["last_batch_iteration"].is_number_integer()) {
    return invalid_argument("lr scheduler state: expected {{type, last_batch_iteration}}, got {}",
                            state.dump());
  }
  const std::string saved_type = state["type"].get<std::string>();
  if (saved_type != type_name() && params_.kind == LrScheduleKind::kHuggingFace &&
      (saved_type == "WarmupDecayLR" || saved_type == "WarmupCosineLR" ||
       saved_type == "WarmupLR")) {
    // Before HF's formulas, --lr_scheduler_type mapped to a DeepSpeed schedule.
    return invalid_argument(
        "lr scheduler state is for DeepSpeed's {}, but --lr_scheduler_type {} now follows HF's "
        "formula; to continue on the checkpoint's schedule, write a \"scheduler\" block of type "
        "{} in the ds_config (docs/optim.md)",
        saved_type, type_name(), saved_type);
  }
  if (saved_type != type_name()) {
    return invalid_argument(
        "lr scheduler state is for {}, but this run uses {}{}", saved_type, type_name(),
        params_.kind == LrScheduleKind::kHuggingFace ? " (--lr_scheduler_type)" : "");
  }
  const int64_t t = state["last_batch_iteration"].get<int64_t>();
  if (t < -1) return invalid_argument("lr scheduler state: last_batch_iteration {} < -1", t);
  completed_updates_ = t + 1;
  return ok_status();
}

}  // namespace zero::optim
