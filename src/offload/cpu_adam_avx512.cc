// AVX-512 CPU Adam kernel (16 fp32 lanes). Compiled for AVX-512 with a target pragma so the rest
// of the build stays baseline x86-64; only called after cpu_isa_supported(kAvx512).
#include <cstdint>
#include <cstring>

#include "offload/cpu_adam.h"

// Standard headers come first: inline functions defined after this pragma are AVX-512 code, and
// a COMDAT copy of a library inline compiled here could otherwise be picked by the linker for the
// baseline translation units.
#if defined(__clang__)
// clang ignores GCC's target/optimize pragmas: give every function here the same target, and keep
// a*b+c unfused like the scalar reference (bitwise equality).
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c"))), \
                             apply_to = function)
#pragma clang fp contract(off)
#endif
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx2,f16c")
// Same unfused operations as the scalar reference (GCC would otherwise contract to FMA).
#pragma GCC optimize("fp-contract=off")
// GCC 12 reports its own _mm*_undefined_*() helpers as maybe-uninitialized (GCC PR 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

namespace zero::offload::detail {
namespace {

enum Out { kNone, kBf16, kF16 };

struct Consts {
  __m512 b1, b2, omb1, omb2, eps, gs, step, isbc2, dd, l2;
};

// bf16 round-to-nearest-even in integer math. VCVTNEPS2BF16 is not used: it flushes denormal
// inputs to zero, which float_to_bf16 does not.
inline __m256i to_bf16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i hi = _mm512_srli_epi32(u, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  // NaN keeps its sign and high payload with the quiet bit forced, as float_to_bf16.
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
  return _mm512_cvtepi32_epi16(r);
}

// f16 via the hardware converter (round to nearest even; handles subnormals and overflow like
// float_to_f16). NaN lanes are replaced by the canonical quiet NaN of the same sign first, since
// float_to_f16 drops the payload and the hardware keeps it.
inline __m256i to_f16(__m512 x) {
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
  const __m512 qnan = _mm512_castsi512_ps(_mm512_or_si512(sign, _mm512_set1_epi32(0x7fc00000)));
  return _mm512_cvtps_ph(_mm512_mask_mov_ps(x, nan, qnan),
                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// One vector of 16 elements, in optim::adam_update's operation order.
template <bool kL2, bool kDecoupled, Out kOut>
inline void step16(const Consts& k, float* p, const float* g, float* m, float* v, uint16_t* out) {
  __m512 gv = _mm512_mul_ps(_mm512_loadu_ps(g), k.gs);
  __m512 pv = _mm512_loadu_ps(p);
  if constexpr (kL2) gv = _mm512_add_ps(gv, _mm512_mul_ps(k.l2, pv));
  const __m512 mv =
      _mm512_add_ps(_mm512_mul_ps(k.b1, _mm512_loadu_ps(m)), _mm512_mul_ps(k.omb1, gv));
  const __m512 vv = _mm512_add_ps(_mm512_mul_ps(k.b2, _mm512_loadu_ps(v)),
                                  _mm512_mul_ps(k.omb2, _mm512_mul_ps(gv, gv)));
  const __m512 denom = _mm512_add_ps(_mm512_mul_ps(_mm512_sqrt_ps(vv), k.isbc2), k.eps);
  if constexpr (kDecoupled) pv = _mm512_add_ps(pv, _mm512_mul_ps(k.dd, pv));
  pv = _mm512_add_ps(pv, _mm512_mul_ps(k.step, _mm512_div_ps(mv, denom)));
  _mm512_storeu_ps(p, pv);
  _mm512_storeu_ps(m, mv);
  _mm512_storeu_ps(v, vv);
  if constexpr (kOut == kBf16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), to_bf16(pv));
  if constexpr (kOut == kF16) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), to_f16(pv));
}

template <bool kL2, bool kDecoupled, Out kOut>
void tile_loop(const Consts& k, const optim::AdamShard& s, int64_t begin, int64_t end) {
  float* p = s.param;
  const float* g = s.grad;
  float* m = s.exp_avg;
  float* v = s.exp_avg_sq;
  auto* out = static_cast<uint16_t*>(s.param_16bit);
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    step16<kL2, kDecoupled, kOut>(k, p + i, g + i, m + i, v + i, kOut == kNone ? nullptr : out + i);
  }
  if (i == end) return;
  // Ragged tail: run the same vector code on zero-padded copies (the padding lanes are discarded).
  const size_t n = static_cast<size_t>(end - i);
  alignas(64) float tp[16] = {}, tg[16] = {}, tm[16] = {}, tv[16] = {};
  alignas(64) uint16_t to[16];
  std::memcpy(tp, p + i, n * 4);
  std::memcpy(tg, g + i, n * 4);
  std::memcpy(tm, m + i, n * 4);
  std::memcpy(tv, v + i, n * 4);
  step16<kL2, kDecoupled, kOut>(k, tp, tg, tm, tv, to);
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

void adam_tile_avx512(const AdamTileParams& c, const optim::AdamShard& s, int64_t begin,
                      int64_t end) {
  const Consts k{_mm512_set1_ps(c.beta1),
                 _mm512_set1_ps(c.beta2),
                 _mm512_set1_ps(c.one_minus_beta1),
                 _mm512_set1_ps(c.one_minus_beta2),
                 _mm512_set1_ps(c.eps),
                 _mm512_set1_ps(c.grad_scale),
                 _mm512_set1_ps(c.step_size),
                 _mm512_set1_ps(c.inv_sqrt_bc2),
                 _mm512_set1_ps(c.decoupled_decay),
                 _mm512_set1_ps(c.l2_decay)};
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
