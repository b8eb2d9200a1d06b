// `zero bench step`: training-step time per ZeRO stage on this world (run it under mpirun / zero
// launch for several ranks), with overlap_comm off and on measured in the same run, so the time the
// communication thread hid behind compute is a measured difference, not a guess. `--device cuda`
// runs the model on each rank's GPU (EngineOptions::device; the ZeRO state stays in host memory).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace zero::runtime {

struct StepBenchOptions {
  std::string model = "preset:gpt2-tiny";
  std::vector<int> stages = {0, 1, 2, 3};
  int64_t micro_batch = 4;  // per rank
  int64_t grad_accum = 1;
  int64_t block_size = 0;  // 0: min(context, 256)
  int steps = 10;          // timed steps per configuration
  int warmup = 2;          // untimed steps first (at least kStage3WarmupSteps at stage 3)
  bool bf16 = false;
  // Where the model runs: "cpu" or "cuda" (checked before anything is printed: exit 2 without a
  // usable GPU).
  std::string device = "cpu";
  // Stage 3's zero_optimization.offload_param: "none", "cpu" or "nvme" (shards beyond
  // max_in_cpu elements in a swap file under nvme_path; a temporary directory when empty).
  std::string offload_param = "none";
  std::string nvme_path;
  int64_t max_in_cpu = 0;
  // zero_optimization.offload_optimizer: "none" or "cpu" (with device cuda, the OffloadPipeline:
  // its host times per step are printed under each stage's rows). offload_overlap: the CPU Adam
  // during backward (EngineOptions::offload_overlap; gradient clipping 0 then, else 1.0 as always).
  std::string offload_optimizer = "none";
  bool offload_overlap = false;
};

// Stage 3 reaches its steady state in its third step: the first records the parameter access
// trace (ParamCoordinator), the second's forward still gathers every unit itself while its update
// already prefetches the next forward's units, so it moves one full gather more than a later step
// (measured: 5 gathers in steps 2-5, +12.5% wire bytes at world 2-4: bench/results/
// scaling_check.md). Timing starts after at least this many steps there.
inline constexpr int kStage3WarmupSteps = 2;
// The untimed steps `stage` runs before its timed ones, given --warmup.
inline int stage_warmup_steps(int warmup, int stage) {
  return stage == 3 && warmup < kStage3WarmupSteps ? kStage3WarmupSteps : warmup;
}

// Prints a table on rank 0; returns 0, 2 on bad input (--model, --device), or 1 on failure.
int run_step_benchmark(const StepBenchOptions& options, Communicator& comm);

}  // namespace zero::runtime
