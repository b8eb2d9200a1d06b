// DeepSpeed's ZeRO-2 / ZeRO-3 model-states memory estimators, reproduced to the byte and to the
// printed digit (reference/deepspeed-zero.md §4): params + grads + optimizer states, nothing else.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace zero::sharding {

struct EstimateSetup {
  int64_t total_params = 0;          // Ψ, tied weights counted once
  int64_t largest_layer_params = 0;  // L: the largest single module's own parameters (stage 3)
  int64_t num_gpus_per_node = 1;
  int64_t num_nodes = 1;
  double additional_buffer_factor = 1.5;  // multiplies the CPU numbers only
};

// One row of DeepSpeed's table. offload_param / zero_init are meaningful for stage 3 only.
struct EstimateRow {
  int stage = 3;
  bool offload_optimizer = false;
  bool offload_param = false;
  bool zero_init = false;
  int64_t cpu_bytes = 0;
  int64_t gpu_bytes = 0;
};

// Largest Ψ accepted: keeps 18·Ψ below 2^53, where double arithmetic equals Python's exactly.
inline constexpr int64_t kMaxEstimateParams = 500'000'000'000'000;  // 5e14

// Checks the ranges (Ψ > 0, L <= Ψ, counts >= 1, 0 < factor <= 1000). `stage` is 2 or 3.
Status validate_estimate_setup(const EstimateSetup& setup, int stage);

// estimate_zero2_model_states_mem_needs(total_params, gpus, nodes, cpu_offload, factor).
// REQUIRES: validate_estimate_setup(setup, 2).ok().
EstimateRow estimate_zero2_row(const EstimateSetup& setup, bool offload_optimizer);
// estimate_zero3_model_states_mem_needs(...). Follows DeepSpeed's branches: without optimizer
// offload, offload_param is ignored. REQUIRES: validate_estimate_setup(setup, 3).ok().
EstimateRow estimate_zero3_row(const EstimateSetup& setup, bool offload_optimizer,
                               bool offload_param, bool zero_init);

// All rows in the order DeepSpeed's *_all_cold functions print them (stage 2: 2 rows, stage 3:
// 6 rows; offload_param=cpu without offload_optimizer=cpu is skipped as DeepSpeed does).
std::vector<EstimateRow> estimate_all_rows(const EstimateSetup& setup, int stage);

// DeepSpeed's printed table (header + rows), byte for byte, "GB" meaning GiB. Ends with '\n'.
std::string format_estimate_table(const EstimateSetup& setup, int stage,
                                  const std::vector<EstimateRow>& rows);

// {"stage", "offload_optimizer": "cpu"|"none", ["offload_param", "zero_init" (stage 3)],
//  "cpu_bytes", "gpu_bytes"}, keys in that order.
nlohmann::ordered_json estimate_row_to_json(const EstimateRow& row);

}  // namespace zero::sharding
