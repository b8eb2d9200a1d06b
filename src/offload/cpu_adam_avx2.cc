// AVX2 CPU Adam kernel (8 fp32 lanes, F16C for f16). Compiled for AVX2 with a target pragma so the
// rest of the build stays baseline x86-64; only called after cpu_isa_supported(kAvx2).
#include <cstdint>
#include <cstring>

#include "offload/cpu_adam.h"

// Standard headers come first: inline functions defined after this pragma are AVX2 code, and a
// COMDAT copy of a library inline compiled here could otherwise be picked by the linker for the
// baseline translation units. No "fma": every path uses unfused multiply and add.
#if defined(__clang__)
// clang ignores GCC's target/optimize pragmas: give every function here the same target, and keep
// a*b+c unfused like the scalar reference (bitwise equality).
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#pragma clang fp contract(off)
#endif
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#pragma GCC optimize("fp-contract=off")
// GCC 12 reports its own _mm*_undefined_*() helpers as maybe-uninitialized (GCC PR 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

namespace zero::offload::detail {
namespace {

enum Out { kNone, kBf16, kF16 };

struct Consts {
  __m256 b1, b2, omb1, omb2, eps, gs, step, isbc2, dd, l2;
};

// bf16 round-to-nearest-even in integer math (bitwise float_to_bf16, NaN included).
inline __m128i to_bf16(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i hi = _mm256_srli_epi32(u, 16);
  const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
  // Values fit 16 bits, so the unsigned-saturating pack is exact; it packs within 128-bit lanes,
  // and the permute gathers the two useful quadwords.
  const __m256i packed = _mm256_packus_epi32(r, r);
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
}

// f16 via F16C (round to nearest even). NaN lanes become the canonical quiet NaN of the same sign
// first: float_to_f16 drops the payload, the hardware keeps it.
inline __m128i to_f16(__m256 x) {
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256i sign = _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(INT32_MIN));
  const __m256 qnan = _mm256_castsi256_ps(_mm256_or_si256(sign, _mm256_set1_epi32(0x7fc00000)));
  return _mm256_cvtps_ph(_mm256_blendv_ps(x, qnan, nan),
                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// One vector of 8 elements, in optim::adam_update's operation order.
template <bool kL2, bool kDecoupled, Out kOut>
inline void step8(const Consts& k, float* p, const float* g, float* m, float* v, uint16_t* out) {
  __m256 gv = _mm256_mul_ps(_mm256_loadu_ps(g), k.gs);
  __m256 pv = _mm256_loadu_ps(p);
  if constexpr (kL2) gv = _mm256_add_ps(gv, _mm256_mul_ps(k.l2, pv));
  const __m256 mv =
      _mm256_add_ps(_mm256_mul_ps(k.b1, _mm256_loadu_ps(m)), _mm256_mul_ps(k.omb1, gv));
  const __m256 vv = _mm256_add_ps(_mm256_mul_ps(k.b2, _mm256_loadu_ps(v)),
                                  _mm256_mul_ps(k.omb2, _mm256_mul_ps(gv, gv)));
  const __m256 denom = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(vv), k.isbc2), k.eps);
  if constexpr (kDecoupled) pv = _mm256_add_ps(pv, _mm256_mul_ps(k.dd, pv));
  pv = _mm256_add_ps(pv, _mm256_mul_ps(k.step, _mm256_div_ps(mv, denom)));
  _mm256_storeu_ps(p, pv);
  _mm256_storeu_ps(m, mv);
  _mm256_storeu_ps(v, vv);
  if constexpr (kOut == kBf16) _mm_storeu_si128(reinterpret_cast<__m128i*>(out), to_bf16(pv));
  if constexpr (kOut == kF16) _mm_storeu_si128(reinterpret_cast<__m128i*>(out), to_f16(pv));
}

template <bool kL2, bool kDecoupled, Out kOut>
void tile_loop(const Consts& k, const optim::AdamShard& s, int64_t begin, int64_t end) {
  float* p = s.param;
  const float* g = s.grad;
  float* m = s.exp_avg;
  float* v = s.exp_avg_sq;
  auto* out = static_cast<uint16_t*>(s.param_16bit);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    step8<kL2, kDecoupled, kOut>(k, p + i, g + i, m + i, v + i, kOut == kNone ? nullptr : out + i);
  }
  if (i == end) return;
  // Ragged tail: run the same vector code on zero-padded copies (the padding lanes are discarded).
  const size_t n = static_cast<size_t>(end - i);
  alignas(32) float tp[8] = {}, tg[8] = {}, tm[8] = {}, tv[8] = {};
  alignas(32) uint16_t to[8];
  std::memcpy(tp, p + i, n * 4);
  std::memcpy(tg, g + i, n * 4);
  std::memcpy(tm, m + i, n * 4);
  std::memcpy(tv, v + i, n * 4);
  step8<kL2, kDecoupled, kOut>(k, tp, tg, tm, tv, to);
  std::memcpy(p + i, tp, n * 4);
  std::memcpy(m + i, tm, n * 4);
  std::memcpy(v + i, tv, n * 4);
  if constexpr (kOut != kNone) std::memcpy(out + i, to, n * 2);
}

template <bool kL2, bool kDecoupled>
void by_out(const Consts& k, const optim::AdamShard& s, int64_t begin, int64_t end) {
  if (s.param_16bit == nullptr) {
    tile_loop<kL2, kDecoupled, kNone>(k, s, begin, end);
  } else if (s.param_16bit_dtype == DType::kBF16) {
    tile_loop<kL2, kDecoupled, kBf16>(k, s, begin, end);
  } else {
    tile_loop<kL2, kDecoupled, kF16>(k, s, begin, end);
  }
}

}  // namespace

void adam_tile_avx2(const AdamTileParams& c, const optim::AdamShard& s, int64_t begin,
                    int64_t end) {
  const Consts k{_mm256_set1_ps(c.beta1),
                 _mm256_set1_ps(c.beta2),
                 _mm256_set1_ps(c.one_minus_beta1),
                 _mm256_set1_ps(c.one_minus_beta2),
                 _mm256_set1_ps(c.eps),
                 _mm256_set1_ps(c.grad_scale),
                 _mm256_set1_ps(c.step_size),
                 _mm256_set1_ps(c.inv_sqrt_bc2),
                 _mm256_set1_ps(c.decoupled_decay),
                 _mm256_set1_ps(c.l2_decay)};
  if (c.l2) {
    by_out<true, false>(k, s, begin, end);
  } else if (c.decoupled) {
    by_out<false, true>(k, s, begin, end);
  } else {
    by_out<false, false>(k, s, begin, end);
  }
}

}  // namespace zero::offload::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options
#if defined(__clang__)
#pragma clang attribute pop
#endif
