// StepStats: what a person watching a run wants beside the loss — tokens/s, MFU, GPU and host
// memory — for metrics.jsonl, the monitors and the progress line (rank 0).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "runtime/metrics.h"

namespace zero::runtime {

struct StepStatsOptions {
  double flops_per_token = 0;                // runtime/mfu.h train_flops_per_token
  std::optional<double> peak_flops_per_gpu;  // none: MFU is not reported (CPU, unknown GPU)
  int world_size = 1;
  bool cuda = false;  // sample the GPU's memory (cudaMemGetInfo) after each step
};

class StepStats {
 public:
  explicit StepStats(StepStatsOptions options) : options_(options) {}

  // Fills m's watching fields for a step of m.tokens tokens (the global batch) that took `step_s`
  // seconds, sampling the memory now. Keeps the GPU peak (the largest sample: the device arena
  // and the model's buffers are kept across steps, so the use after a step is its high-water mark
  // up to a step's transient buffers).
  void fill(StepMetrics& m, double step_s);

  // MFU at `tokens_per_s` over the whole world, or nullopt when not reported.
  std::optional<double> mfu(double tokens_per_s) const;

  // The progress line's tail after "N tok/s": " | MFU 41.2% | GPU 12345 MiB (peak 14000 MiB)" on
  // the CUDA device, " | host RSS 812 MiB" on the CPU, from the last fill() and `tokens_per_s`.
  std::string progress_fields(double tokens_per_s) const;

 private:
  StepStatsOptions options_;
  std::optional<int64_t> gpu_used_bytes_, gpu_peak_bytes_, host_rss_bytes_;
};

}  // namespace zero::runtime
