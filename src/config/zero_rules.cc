// apply_zero_rules (config/zero_rules.h): which stage allows which offload, written once.
#include "config/zero_rules.h"

#include <optional>

#include <fmt/format.h>

namespace zero::config {

bool ZeroRules::ok() const {
  for (const ZeroRuleFinding& f : findings) {
    if (f.error) return false;
  }
  return true;
}

Status ZeroRules::first_error() const {
  for (const ZeroRuleFinding& f : findings) {
    if (f.error) return Status(f.code, f.text());
  }
  return ok_status();
}

std::vector<std::string> ZeroRules::warnings() const {
  std::vector<std::string> out;
  for (const ZeroRuleFinding& f : findings) {
    if (!f.error) out.push_back(f.text());
  }
  return out;
}

namespace {

const char* kOptim = "zero_optimization.offload_optimizer";
const char* kParam = "zero_optimization.offload_param";
const char* kMaster = "bf16.bf16_master_weights_and_grads";
const char* kStates = "bf16.bf16_optimizer_states";

// DeepSpeed 0.19's restrictions on bf16 master weights / optimizer states (runtime/config.py,
// base_optimizer.py _configure_master_weights, the stages' _enforce_cpu_offload), applied to the
// facts after the stage's demotions: ZeRO stage 1-3; optimizer states only with master weights;
// fp32 moments with a bf16 master only under optimizer offload (DeepSpeedCPUAdam); under offload
// the CPU Adam (Adam / AdamW). Stricter: bf16.enabled is required (the master weights are the bf16
// model's own values; DeepSpeed would make a lossy bf16 copy of an fp32 or fp16 model).
std::optional<ZeroRuleFinding> bf16_state_finding(const ZeroPlacement& p,
                                                  OffloadTarget optimizer_offload, int stage) {
  if (!p.bf16_master_weights && !p.bf16_optimizer_states) return std::nullopt;
  auto error = [](std::string key, std::string message, std::string hint,
                  StatusCode code = StatusCode::kInvalidArgument) {
    return ZeroRuleFinding{true, code, std::move(key), std::move(message), std::move(hint)};
  };
  const char* key = p.bf16_master_weights ? kMaster : kStates;
  if (stage == 0) {
    return error(key,
                 fmt::format("only supported with ZeRO stage 1, 2 or 3 (zero_optimization.stage "
                             "is {}), as in DeepSpeed",
                             p.stage_text),
                 "set zero_optimization.stage to 1, 2 or 3");
  }
  if (p.bf16_optimizer_states && !p.bf16_master_weights) {
    return error(kStates, fmt::format("requires {} to be true, as in DeepSpeed", kMaster),
                 fmt::format("set {} to true, or remove bf16_optimizer_states", kMaster));
  }
  if (!p.bf16) {
    return error(kMaster,
                 "needs bf16.enabled: true (the master weights are the bf16 model's values)",
                 "enable bf16, or remove the key");
  }
  if (!p.bf16_optimizer_states && optimizer_offload == OffloadTarget::kNone) {
    return error(kMaster,
                 "fp32 optimizer states with bf16 master weights need ZeRO-Offload "
                 "(zero_optimization.offload_optimizer.device \"cpu\" or \"nvme\": "
                 "DeepSpeedCPUAdam), as in DeepSpeed",
                 "offload the optimizer, or set bf16.bf16_optimizer_states to true");
  }
  if (p.lamb) {
    return error("optimizer.type",
                 fmt::format("Lamb with {}: the bf16 optimizer state is implemented for Adam / "
                             "AdamW (DeepSpeedCPUAdam's role under offload)",
                             key),
                 "use Adam or AdamW", StatusCode::kUnimplemented);
  }
  return std::nullopt;
}

}  // namespace

ZeroRules apply_zero_rules(const ZeroPlacement& p) {
  ZeroRules r;
  r.optimizer_offload = p.optimizer_offload;
  r.param_offload = p.param_offload;
  auto error = [&](std::string key, std::string message, std::string hint = {},
                   StatusCode code = StatusCode::kInvalidArgument) {
    r.findings.push_back({true, code, std::move(key), std::move(message), std::move(hint)});
  };
  auto warning = [&](std::string key, std::string message, std::string hint = {}) {
    r.findings.push_back(
        {false, StatusCode::kOk, std::move(key), std::move(message), std::move(hint)});
  };
  // NVMe offload needs a swap directory; DeepSpeed fails at start-up without one. (Checked after
  // the stage's demotions: below stage 3 neither block reaches NVMe.)
  auto need_nvme_path = [&](const char* block, OffloadTarget target, bool given) {
    if (target == OffloadTarget::kNvme && !given) {
      error(std::string(block) + ".nvme_path",
            fmt::format("missing: required when {}.device is \"nvme\"", block));
    }
  };
  if (p.ratio && !(*p.ratio >= 0.0 && *p.ratio <= 1.0)) {
    error(std::string(kOptim) + ".ratio", fmt::format("{} is not in [0, 1]", *p.ratio));
  }
  if (!p.stage) {  // "auto" or invalid: the stage rules wait for the stage
    need_nvme_path(kOptim, r.optimizer_offload, p.optimizer_nvme_path);
    need_nvme_path(kParam, r.param_offload, p.param_nvme_path);
    return r;
  }
  const int stage = *p.stage;
  const std::string is_stage = fmt::format("zero_optimization.stage is {}", p.stage_text);
  if (stage < 0 || stage > 3) {
    error("zero_optimization.stage", fmt::format("{} is not a ZeRO stage (0, 1, 2 or 3)", stage));
    return r;
  }
  // Stricter than DeepSpeed, which ignores the block without ZeRO: an offload that would not
  // happen is an error, not a run that silently needs 12 more bytes per parameter on the device.
  if (p.optimizer_offload != OffloadTarget::kNone && stage == 0) {
    error(std::string(kOptim) + ".device",
          fmt::format("optimizer offload needs ZeRO stage 1, 2 or 3 ({})", is_stage),
          "set zero_optimization.stage to 1, 2 or 3, or remove the offload_optimizer block");
  }
  if (p.param_offload != OffloadTarget::kNone && stage < 3) {
    warning(kParam, fmt::format("ignored below ZeRO stage 3 ({})", is_stage),
            "DeepSpeed ignores it too; use stage 3 to offload parameters");
    r.param_offload = OffloadTarget::kNone;
  }
  if (p.optimizer_offload == OffloadTarget::kNvme && stage > 0 && stage < 3) {
    warning(std::string(kOptim) + ".device",
            fmt::format("\"nvme\" is treated as \"cpu\" below ZeRO stage 3 ({})", is_stage),
            "DeepSpeed does the same");
    r.optimizer_offload = OffloadTarget::kCpu;
  }
  need_nvme_path(kOptim, r.optimizer_offload, p.optimizer_nvme_path);
  need_nvme_path(kParam, r.param_offload, p.param_nvme_path);
  if (p.ratio && *p.ratio >= 0.0 && *p.ratio < 1.0 && stage < 3) {
    error(std::string(kOptim) + ".ratio",
          fmt::format("partial offload (ratio < 1) needs ZeRO stage 3 ({})", is_stage));
  }
  if (auto f = bf16_state_finding(p, r.optimizer_offload, stage)) r.findings.push_back(*f);
  if (p.lamb && stage >= 1 && p.world_size > 1) {
    error("optimizer.type",
          fmt::format("Lamb with ZeRO stage {} across {} ranks is not supported (its per-tensor "
                      "trust ratio needs whole tensors; use stage 0)",
                      stage, p.world_size),
          {}, StatusCode::kUnimplemented);
  }
  return r;
}

}  // namespace zero::config
