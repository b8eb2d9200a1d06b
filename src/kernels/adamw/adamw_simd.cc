// CPU Adam dispatch: the run-time ISA choice and OpenMP over tiles. The scalar path is the
// reference's own tile body (adamw_cpu.cc); the SIMD bodies are adamw_avx2.cc / adamw_avx512.cc.
#include "kernels/adamw/adamw_simd.h"

#include <cpuid.h>

#include <omp.h>

#include <algorithm>

#include "core/check.h"
#include "kernels/adamw/adamw_tile.h"

namespace zero::kernels::cpu {

std::string_view cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAuto: return "auto";
    case CpuIsa::kScalar: return "scalar";
    case CpuIsa::kAvx2: return "avx2";
    case CpuIsa::kAvx512: return "avx512";
  }
  return "?";
}

bool parse_cpu_isa(std::string_view name, CpuIsa* isa) {
  for (CpuIsa c : {CpuIsa::kAuto, CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (name == cpu_isa_name(c)) {
      *isa = c;
      return true;
    }
  }
  return false;
}

// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  return (ecx & (1u << 29)) != 0;
}

bool cpu_isa_supported(CpuIsa isa) {
  // __builtin_cpu_supports also checks that the OS saves the YMM/ZMM state (XCR0).
  switch (isa) {
    case CpuIsa::kAuto:
    case CpuIsa::kScalar: return true;
    case CpuIsa::kAvx2: return __builtin_cpu_supports("avx2") && cpu_has_f16c();
    case CpuIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
  }
  return false;
}

CpuIsa best_cpu_isa() {
  if (cpu_isa_supported(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
  if (cpu_isa_supported(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
  return CpuIsa::kScalar;
}

void adam_update_simd(const AdamArgs& args, const AdamShard& shard, float grad_scale,
                      const AdamSimdOptions& options) {
  ZERO_CHECK(options.tile_numel > 0, "tile_numel must be positive, got ", options.tile_numel);
  check_adam_call(args, shard, "adam_update_simd");
  if (shard.numel == 0) return;

  const CpuIsa isa = options.isa == CpuIsa::kAuto ? best_cpu_isa() : options.isa;
  ZERO_CHECK(cpu_isa_supported(isa), "CPU Adam path ", cpu_isa_name(isa),
             " is not supported by this CPU");
  detail::AdamTileFn tile_fn = detail::adam_tile_scalar;
  if (isa == CpuIsa::kAvx512) tile_fn = detail::adam_tile_avx512;
  if (isa == CpuIsa::kAvx2) tile_fn = detail::adam_tile_avx2;

  const AdamConstants c = adam_constants(args, grad_scale);

  // Tiles are rounded to whole cache lines of every array (16 fp32, 32 16-bit values) so two
  // threads never write the same line; only the shard's last tile is ragged.
  const int64_t tile = std::max<int64_t>(32, (options.tile_numel + 31) / 32 * 32);
  const int64_t num_tiles = (shard.numel + tile - 1) / tile;
  const int threads = options.num_threads > 0 ? options.num_threads : omp_get_max_threads();
#pragma omp parallel for schedule(static) num_threads(threads) if (num_tiles > 1 && threads > 1)
  for (int64_t t = 0; t < num_tiles; ++t) {
    const int64_t begin = t * tile;
    tile_fn(c, shard, begin, std::min(shard.numel, begin + tile));
  }
}

}  // namespace zero::kernels::cpu
