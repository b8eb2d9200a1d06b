// `zero bench adam`: CPU Adam throughput against STREAM triad, the scalar reference and PyTorch;
// fp32 and bf16 optimizer state, and DeepSpeedCPUAdam's bf16 state side by side.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/adamw/adamw_simd.h"

namespace zero::kernels::cpu {

struct AdamBenchOptions {
  int64_t numel = int64_t{32} << 20;  // 32M params: 512 MiB of fp32 state, far beyond the caches
  int threads = 0;                    // 0: OpenMP's default
  int iters = 10;                     // timed steps per configuration (after one warm-up step)
  std::string param_16bit = "bf16";   // dtype of the extra 16-bit param copy: bf16, f16 or none
  CpuIsa isa = CpuIsa::kAuto;
  bool scalar_reference = true;  // also time adam_update
  bool torch = true;             // also run tools/bench_adam_torch.py when torch imports
  std::string python = "/usr/bin/python3";
  std::string torch_script;  // empty: <source root>/tools/bench_adam_torch.py
  bool bf16_state = true;    // also time the bf16-state update (bf16 master, bf16 / fp32 moments)
  // A python with deepspeed (0.19: DeepSpeedCPUAdam(fp32_optimizer_states=False)): runs
  // tools/bench_adam_deepspeed.py on the same bf16 state as ours (values and speed). Empty: skip.
  std::string deepspeed_python;
  std::string deepspeed_script;  // empty: <source root>/tools/bench_adam_deepspeed.py
};

// Runs the benchmark and prints a report (markdown-friendly) to stdout. Returns 0 on success,
// 2 on bad options.
int run_adam_benchmark(const AdamBenchOptions& options);

}  // namespace zero::kernels::cpu
