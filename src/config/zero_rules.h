// The ZeRO stage / offload / optimizer / optimizer-state dtype rules, written once (issue 26 item
// 2; DeepSpeed 0.19's bf16 master weights and optimizer states, issue 27): `zero config check`
// (validate_ds_config), the run plan and the Engine all ask apply_zero_rules, so what the checker
// accepts is what the engine runs, and a warning printed is the rule that was applied.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace zero::config {

enum class OffloadTarget { kNone, kCpu, kNvme };

// What the rules look at, however it was given (a ds_config document, or engine options).
struct ZeroPlacement {
  std::optional<int> stage = 0;  // nullopt: not known yet ("auto" or invalid; stage rules skipped)
  std::string stage_text = "0";  // as written, for messages
  OffloadTarget optimizer_offload = OffloadTarget::kNone;
  OffloadTarget param_offload = OffloadTarget::kNone;
  bool optimizer_nvme_path = false;    // offload_optimizer.nvme_path given and non-empty
  bool param_nvme_path = false;        // offload_param.nvme_path given and non-empty
  std::optional<double> ratio;         // offload_optimizer.ratio, when given
  bool lamb = false;                   // optimizer.type is Lamb
  int world_size = 0;                  // 0: not known (config check without --world_size)
  bool bf16 = false;                   // bf16.enabled
  bool bf16_master_weights = false;    // bf16.bf16_master_weights_and_grads
  bool bf16_optimizer_states = false;  // bf16.bf16_optimizer_states
};

// One rule's verdict on a key. An error stops the run; a warning says what DeepSpeed does instead
// (and what runs here).
struct ZeroRuleFinding {
  bool error = false;
  StatusCode code = StatusCode::kInvalidArgument;  // for errors
  std::string key;                                 // "zero_optimization.offload_param"
  std::string message;
  std::string hint;  // what to do (may be empty)
  // "key: message" (what the engine's Status and warnings say).
  std::string text() const { return key + ": " + message; }
};

struct ZeroRules {
  std::vector<ZeroRuleFinding> findings;
  // What runs after DeepSpeed's demotions (nvme optimizer offload as cpu below stage 3, parameter
  // offload dropped below stage 3).
  OffloadTarget optimizer_offload = OffloadTarget::kNone;
  OffloadTarget param_offload = OffloadTarget::kNone;

  bool ok() const;
  // The first error as a Status (its code, "key: message"), or OK.
  Status first_error() const;
  // The warnings' texts, in rule order.
  std::vector<std::string> warnings() const;
};

ZeroRules apply_zero_rules(const ZeroPlacement& placement);

}  // namespace zero::config
