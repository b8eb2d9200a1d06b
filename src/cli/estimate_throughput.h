// `zero estimate --throughput`: the step time and tokens/s of each ZeRO stage at N GPUs from one
// GPU's compute time and the stage's collectives over named links (sharding/throughput_model.h;
// docs/scaling.md). The flags live on the estimate subcommand beside the memory tables' flags.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "model/model_config.h"

namespace zero::cli {

// Values are range-checked at parse time (flag_checks.h); "given" is the option's count, never a
// sentinel value.
struct ThroughputFlags {
  bool enabled = false;  // --throughput
  double step_ms = 0;
  double optimizer_ms = 0;
  double gradient_ms = 0;
  std::string gpu;
  double peak_tflops = 0;
  double mfu = 0;
  int64_t micro_batch = 1;
  int64_t seq_len = 1024;
  int64_t grad_accum = 1;
  std::string dtype = "bf16";
  std::string communication_data_type;  // not given: the model dtype (DeepSpeed's default)
  std::string interconnect = "nvlink";
  double interconnect_gbs = 0;
  double interconnect_latency_us = 0;
  std::string interconnect_sweep;  // comm_sweep_bench's lines: the link's cost per collective
  std::string network = "infiniband";
  double network_gbs = 0;
  double network_latency_us = 0;
  std::string network_sweep;
  std::string collective = "ring";
  std::string overlap_comm;  // not given: DeepSpeed's default (on at stage 3 only)
  double overlap_efficiency = 0;
  double oversubscription = 1;
  int64_t collectives_per_pass =
      1;  // not given: the model's layers + 2 (one per unit), 1 with --params
  double stage3_max_reuse_distance = 1e9;
  // The options whose presence matters (set by add_throughput_flags).
  CLI::Option* step_ms_option = nullptr;
  CLI::Option* gpu_option = nullptr;
  CLI::Option* peak_tflops_option = nullptr;
  CLI::Option* mfu_option = nullptr;
  CLI::Option* communication_data_type_option = nullptr;
  CLI::Option* interconnect_gbs_option = nullptr;
  CLI::Option* interconnect_latency_option = nullptr;
  CLI::Option* network_gbs_option = nullptr;
  CLI::Option* network_latency_option = nullptr;
  CLI::Option* interconnect_sweep_option = nullptr;
  CLI::Option* network_sweep_option = nullptr;
  CLI::Option* overlap_comm_option = nullptr;
  CLI::Option* overlap_efficiency_option = nullptr;
  CLI::Option* collectives_per_pass_option = nullptr;
  // Every option that means nothing without --throughput (check_throughput_flags_unused).
  std::vector<CLI::Option*> options;
};

// Registers --throughput and its options on `sub`.
void add_throughput_flags(CLI::App* sub, ThroughputFlags& flags);

// Without --throughput: an error naming the first throughput-only flag given, else OK.
Status check_throughput_flags_unused(const ThroughputFlags& flags);

struct ThroughputModelSource {
  std::string name;          // --model's value, or "--params"
  int64_t total_params = 0;  // Ψ
  // From --model: the attention term of the training FLOPs and the unit count. None with --params.
  std::optional<model::ModelConfig> config;
};

// Prints the prediction for `stages` (text table or, with json, one JSON object) on stdout.
Status run_throughput_estimate(const ThroughputFlags& flags, const ThroughputModelSource& model,
                               int64_t num_gpus_per_node, int64_t num_nodes,
                               const std::vector<int>& stages, bool json);

}  // namespace zero::cli
