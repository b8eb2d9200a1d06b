// Fast CPU Adam/AdamW for offloaded optimizer states (ZeRO-Offload): one streaming pass over
// param, grad, m and v per step, AVX-512 / AVX2 picked at run time, OpenMP over tiles. One SIMD
// body (adamw_simd_body.h) templated on the vector width, instantiated by adamw_avx2.cc (8 lanes)
// and adamw_avx512.cc (16 lanes); the dispatch and the portable path are in adamw_simd.cc.
#pragma once

#include <cstdint>
#include <string_view>

#include "kernels/adamw/adamw.h"

namespace zero::kernels::cpu {

// Instruction-set paths of the CPU kernels. kAuto picks the widest one the CPU (and OS) supports.
enum class CpuIsa : uint8_t { kAuto, kScalar, kAvx2, kAvx512 };

// "auto" / "scalar" / "avx2" / "avx512".
std::string_view cpu_isa_name(CpuIsa isa);
// Inverse of cpu_isa_name; false for an unknown name.
bool parse_cpu_isa(std::string_view name, CpuIsa* isa);
// Whether this CPU can run `isa` (kAuto and kScalar always can).
bool cpu_isa_supported(CpuIsa isa);
// The path kAuto resolves to on this CPU.
CpuIsa best_cpu_isa();

struct AdamSimdOptions {
  // Elements per OpenMP work item, like DeepSpeed's sub-group tiling. Small enough that the two
  // threads of a 2-core host share the work evenly; large enough that scheduling costs nothing.
  int64_t tile_numel = int64_t{1} << 16;
  CpuIsa isa = CpuIsa::kAuto;  // tests and benchmarks force a path; unsupported paths CHECK-fail
  int num_threads = 0;         // 0: OpenMP's default (OMP_NUM_THREADS)
};

// Same contract and per-element formula as adam_update (see adamw.h), vectorised. Every path
// performs the same unfused fp32 operations in the same order (no FMA contraction), so the results
// are bitwise identical across ISA paths and thread counts, and bitwise equal to adam_update when
// that is compiled without FMA contraction (the default x86-64 build).
// The optional 16-bit copy is written in the same pass with round-to-nearest-even, bitwise equal
// to core/dtype.h's float_to_bf16 / float_to_f16 (NaN included). No allocations.
void adam_update_simd(const AdamArgs& args, const AdamShard& shard, float grad_scale,
                      const AdamSimdOptions& options = {});
}  // namespace zero::kernels::cpu
