// Parsing of DeepSpeed's `optimizer` block (see optimizer_spec.h for the accepted surface).
#include "optim/optimizer_spec.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <set>

namespace zero::optim {

namespace {

using nlohmann::json;

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

Status read_number(const json& params, const char* key, double* out) {
  auto it = params.find(key);
  if (it == params.end()) return ok_status();
  if (!it->is_number() || it->is_boolean()) {
    return invalid_argument("optimizer.params.{}: expected a number, got {}", key, it->dump());
  }
  *out = it->get<double>();
  return ok_status();
}

Status read_bool(const json& params, const char* key, bool* out) {
  auto it = params.find(key);
  if (it == params.end()) return ok_status();
  if (!it->is_boolean()) {
    return invalid_argument("optimizer.params.{}: expected true or false, got {}", key, it->dump());
  }
  *out = it->get<bool>();
  return ok_status();
}

Status read_betas(const json& params, OptimizerSpec* spec) {
  auto it = params.find("betas");
  if (it == params.end()) return ok_status();
  if (!it->is_array() || it->size() != 2 || !(*it)[0].is_number() || !(*it)[1].is_number()) {
    return invalid_argument("optimizer.params.betas: expected [beta1, beta2], got {}", it->dump());
  }
  spec->beta1 = (*it)[0].get<double>();
  spec->beta2 = (*it)[1].get<double>();
  return ok_status();
}

Status check_keys(const json& params, const std::set<std::string>& allowed, std::string_view type) {
  for (const auto& [key, value] : params.items()) {
    if (key == "max_grad_norm") {
      return invalid_argument(
          "optimizer.params.max_grad_norm is not supported (DeepSpeed rejects it too): use the "
          "top-level \"gradient_clipping\" key");
    }
    if (!allowed.contains(key)) {
      std::string names;
      for (const auto& a : allowed) names += (names.empty() ? "" : ", ") + a;
      return invalid_argument("optimizer.params.{}: unknown parameter for optimizer {} (known: {})",
                              key, type, names);
    }
  }
  return ok_status();
}

Status validate(const OptimizerSpec& s) {
  if (!(s.lr >= 0)) return invalid_argument("optimizer.params.lr must be >= 0, got {}", s.lr);
  if (!(s.eps >= 0)) return invalid_argument("optimizer.params.eps must be >= 0, got {}", s.eps);
  if (!(s.beta1 >= 0 && s.beta1 < 1) || !(s.beta2 >= 0 && s.beta2 < 1)) {
    return invalid_argument("optimizer.params.betas must be in [0, 1), got [{}, {}]", s.beta1,
                            s.beta2);
  }
  if (!(s.weight_decay >= 0)) {
    return invalid_argument("optimizer.params.weight_decay must be >= 0, got {}", s.weight_decay);
  }
  if (s.kind == OptimizerKind::kLamb && !(s.min_coeff >= 0 && s.min_coeff <= s.max_coeff)) {
    return invalid_argument("optimizer.params: need 0 <= min_coeff <= max_coeff, got {} and {}",
                            s.min_coeff, s.max_coeff);
  }
  return ok_status();
}

}  // namespace

StatusOr<OptimizerSpec> optimizer_spec_from_json(std::string_view type, const json& params_in) {
  const json params = params_in.is_null() ? json::object() : params_in;
  if (!params.is_object()) {
    return invalid_argument("optimizer.params: expected an object, got {}", params.dump());
  }
  OptimizerSpec spec;
  spec.type_name = lower(type);
  const std::string& name = spec.type_name;
  bool amsgrad = false;
  if (name == "adam" || name == "adamw") {
    spec.kind = OptimizerKind::kAdam;
    ZERO_RETURN_IF_ERROR(check_keys(params,
                                    {"lr", "betas", "eps", "weight_decay", "bias_correction",
                                     "adam_w_mode", "torch_adam", "amsgrad", "set_grad_none"},
                                    type));
    ZERO_RETURN_IF_ERROR(read_bool(params, "adam_w_mode", &spec.adam_w_mode));
    ZERO_RETURN_IF_ERROR(read_bool(params, "torch_adam", &spec.torch_adam));
    // DeepSpeed: effective_adam_w_mode = (type == "adamw") or adam_w_mode.
    if (name == "adamw") spec.adam_w_mode = true;
  } else if (name == "lamb") {
    spec.kind = OptimizerKind::kLamb;
    ZERO_RETURN_IF_ERROR(check_keys(params,
                                    {"lr", "betas", "eps", "weight_decay", "bias_correction",
                                     "eps_inside_sqrt", "max_coeff", "min_coeff", "amsgrad"},
                                    type));
    ZERO_RETURN_IF_ERROR(read_number(params, "max_coeff", &spec.max_coeff));
    ZERO_RETURN_IF_ERROR(read_number(params, "min_coeff", &spec.min_coeff));
    ZERO_RETURN_IF_ERROR(read_bool(params, "eps_inside_sqrt", &spec.eps_inside_sqrt));
  } else {
    static constexpr std::array<std::string_view, 9> kOtherDeepSpeed = {
        "onebitadam", "zerooneadam", "onebitlamb", "adagrad", "lion",
        "muadam",     "muadamw",     "musgd",      "sgd"};
    if (std::find(kOtherDeepSpeed.begin(), kOtherDeepSpeed.end(), name) != kOtherDeepSpeed.end()) {
      return unimplemented("optimizer.type \"{}\" is not implemented; use Adam, AdamW or Lamb",
                           type);
    }
    return invalid_argument("optimizer.type \"{}\" is unknown; use Adam, AdamW or Lamb", type);
  }
  ZERO_RETURN_IF_ERROR(read_number(params, "lr", &spec.lr));
  ZERO_RETURN_IF_ERROR(read_betas(params, &spec));
  ZERO_RETURN_IF_ERROR(read_number(params, "eps", &spec.eps));
  ZERO_RETURN_IF_ERROR(read_number(params, "weight_decay", &spec.weight_decay));
  ZERO_RETURN_IF_ERROR(read_bool(params, "bias_correction", &spec.bias_correction));
  ZERO_RETURN_IF_ERROR(read_bool(params, "amsgrad", &amsgrad));
  if (params.contains("set_grad_none")) {
    bool ignored = false;  // FusedAdam's zero_grad behaviour: meaningless here
    ZERO_RETURN_IF_ERROR(read_bool(params, "set_grad_none", &ignored));
  }
  if (amsgrad) {
    return unimplemented(
        "optimizer.params.amsgrad: the AMSGrad variant is not supported "
        "(DeepSpeed's FusedAdam, CPUAdam and FusedLamb reject it too)");
  }
  ZERO_RETURN_IF_ERROR(validate(spec));
  return spec;
}

AdamArgs OptimizerSpec::adam_args(double step_lr, int64_t step, double group_weight_decay) const {
  AdamArgs a;
  a.lr = static_cast<float>(step_lr);
  a.beta1 = static_cast<float>(beta1);
  a.beta2 = static_cast<float>(beta2);
  a.eps = static_cast<float>(eps);
  a.weight_decay = static_cast<float>(group_weight_decay);
  a.step = step;
  a.adam_w_mode = adam_w_mode;
  a.bias_correction = bias_correction;
  return a;
}

LambArgs OptimizerSpec::lamb_args(double step_lr, int64_t step, double group_weight_decay) const {
  LambArgs a;
  a.lr = static_cast<float>(step_lr);
  a.beta1 = static_cast<float>(beta1);
  a.beta2 = static_cast<float>(beta2);
  a.eps = static_cast<float>(eps);
  a.weight_decay = static_cast<float>(group_weight_decay);
  a.max_coeff = static_cast<float>(max_coeff);
  a.min_coeff = static_cast<float>(min_coeff);
  a.step = step;
  a.bias_correction = bias_correction;
  a.eps_inside_sqrt = eps_inside_sqrt;
  return a;
}

json optimizer_spec_to_json(const OptimizerSpec& s) {
  json j = {{"type", s.type_name},
            {"lr", s.lr},
            {"betas", {s.beta1, s.beta2}},
            {"eps", s.eps},
            {"weight_decay", s.weight_decay},
            {"bias_correction", s.bias_correction}};
  if (s.kind == OptimizerKind::kAdam) {
    j["adam_w_mode"] = s.adam_w_mode;
    j["torch_adam"] = s.torch_adam;
  } else {
    j["max_coeff"] = s.max_coeff;
    j["min_coeff"] = s.min_coeff;
    j["eps_inside_sqrt"] = s.eps_inside_sqrt;
  }
  return j;
}

}  // namespace zero::optim
