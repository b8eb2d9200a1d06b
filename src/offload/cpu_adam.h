// Forwarding header: the vectorised CPU AdamW moved to kernels/adamw/adamw_simd.h
// (kernels::cpu::adam_update_simd). Kept so runtime/engine.cc compiles unchanged; new code
// includes the kernel header.
#pragma once

#include "kernels/adamw/adamw_simd.h"
#include "optim/adam.h"

namespace zero::offload {

using kernels::cpu::best_cpu_isa;
using kernels::cpu::cpu_isa_name;
using kernels::cpu::cpu_isa_supported;
using kernels::cpu::CpuIsa;
using kernels::cpu::parse_cpu_isa;
using CpuAdamOptions = kernels::cpu::AdamSimdOptions;

inline void cpu_adam_update(const optim::AdamArgs& args, const optim::AdamShard& shard,
                            float grad_scale, const CpuAdamOptions& options = {}) {
  kernels::cpu::adam_update_simd(args, shard, grad_scale, options);
}

}  // namespace zero::offload
