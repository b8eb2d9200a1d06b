// CPU Adam dispatch (run-time ISA choice, OpenMP over tiles) and the portable scalar kernel.
#include "kernels/adamw/adamw_simd.h"

#include <cpuid.h>

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"

// Every ISA path must perform the same unfused operations as adam_update so that they
// agree bitwise; GCC's default -ffp-contract=fast would fuse a*b+c where FMA is available.
#pragma GCC optimize("fp-contract=off")

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

namespace detail {
namespace {

template <bool kL2, bool kDecoupled>
void scalar_loop(const AdamTileParams& c, const AdamShard& s, int64_t begin, int64_t end) {
  float* __restrict__ p = s.param;
  const float* __restrict__ g_in = s.grad;
  float* __restrict__ m = s.exp_avg;
  float* __restrict__ v = s.exp_avg_sq;
  for (int64_t i = begin; i < end; ++i) {
    float g = g_in[i] * c.grad_scale;
    float pi = p[i];
    if constexpr (kL2) g = g + c.l2_decay * pi;
    const float mi = c.beta1 * m[i] + c.one_minus_beta1 * g;
    const float vi = c.beta2 * v[i] + c.one_minus_beta2 * (g * g);
    const float denom = std::sqrt(vi) * c.inv_sqrt_bc2 + c.eps;
    if constexpr (kDecoupled) pi = pi + c.decoupled_decay * pi;
    p[i] = pi + c.step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
  if (s.param_16bit == nullptr) return;
  if (s.param_16bit_dtype == DType::kBF16) {
    auto* out = static_cast<bf16*>(s.param_16bit);
    for (int64_t i = begin; i < end; ++i) out[i] = float_to_bf16(p[i]);
  } else {
    auto* out = static_cast<f16*>(s.param_16bit);
    for (int64_t i = begin; i < end; ++i) out[i] = float_to_f16(p[i]);
  }
}

}  // namespace

void adam_tile_scalar(const AdamTileParams& c, const AdamShard& s, int64_t begin, int64_t end) {
  if (c.l2) {
    scalar_loop<true, false>(c, s, begin, end);
  } else if (c.decoupled) {
    scalar_loop<false, true>(c, s, begin, end);
  } else {
    scalar_loop<false, false>(c, s, begin, end);
  }
}

}  // namespace detail

void adam_update_simd(const AdamArgs& args, const AdamShard& shard, float grad_scale,
                      const AdamSimdOptions& options) {
  ZERO_CHECK(args.step >= 1, "adam step counter must be >= 1, got ", args.step);
  ZERO_CHECK(shard.numel >= 0, "negative numel ", shard.numel);
  ZERO_CHECK(options.tile_numel > 0, "tile_numel must be positive, got ", options.tile_numel);
  if (shard.numel == 0) return;
  ZERO_CHECK(shard.param && shard.grad && shard.exp_avg && shard.exp_avg_sq,
             "adam_update_simd: null buffer");
  ZERO_CHECK(shard.param_16bit == nullptr || shard.param_16bit_dtype != DType::kF32,
             "param_16bit must be bf16 or f16");

  const CpuIsa isa = options.isa == CpuIsa::kAuto ? best_cpu_isa() : options.isa;
  ZERO_CHECK(cpu_isa_supported(isa), "CPU Adam path ", cpu_isa_name(isa),
             " is not supported by this CPU");
  detail::AdamTileFn tile_fn = detail::adam_tile_scalar;
  if (isa == CpuIsa::kAvx512) tile_fn = detail::adam_tile_avx512;
  if (isa == CpuIsa::kAvx2) tile_fn = detail::adam_tile_avx2;

  const AdamScalars s = adam_scalars(args);
  detail::AdamTileParams c;
  c.beta1 = args.beta1;
  c.beta2 = args.beta2;
  c.one_minus_beta1 = 1.0f - args.beta1;
  c.one_minus_beta2 = 1.0f - args.beta2;
  c.eps = args.eps;
  c.grad_scale = grad_scale;
  c.step_size = s.step_size;
  c.inv_sqrt_bc2 = s.inv_sqrt_bc2;
  c.decoupled_decay = s.decoupled_decay;
  c.l2_decay = s.l2_decay;
  c.l2 = s.l2_decay != 0.f;
  c.decoupled = s.decoupled_decay != 0.f;

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
