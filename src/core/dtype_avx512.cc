// AVX-512F instance of dtype_simd.h (16 lanes of the scalar integer rounding in dtype.h). Compiled
// for AVX-512 by a target pragma so the rest of the build stays baseline x86-64; only called after
// dtype_isa_supported(kAvx512). VCVTNEPS2BF16 is not used: it flushes denormal inputs to zero.
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/dtype_simd.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#endif
#pragma GCC push_options
#pragma GCC target("avx512f")
// GCC 12 reports its own _mm*_undefined_*() helpers as maybe-uninitialized (GCC PR 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

namespace zero::detail {
namespace {

// The 32-bit pattern whose upper half is float_to_bf16(x) (lower half: garbage below bit 16).
inline __m512i bf16_rounded_bits(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  // NaN: keep sign and payload, set the quiet bit (bit 6 of the bf16, bit 22 of the float).
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  return _mm512_mask_mov_epi32(rounded, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x00400000)));
}

inline __m512 bf16_round(__m512 x) {
  return _mm512_castsi512_ps(
      _mm512_and_si512(bf16_rounded_bits(x), _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
}

void from_f32(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i r = _mm512_srli_epi32(bf16_rounded_bits(_mm512_loadu_ps(src + i)), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(r));
  }
  for (; i < n; ++i) dst[i] = float_to_bf16(src[i]).bits;
}

void to_f32(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i h =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
  }
  for (; i < n; ++i) dst[i] = bf16_to_float(bf16{src[i]});
}

void round(const float* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, bf16_round(_mm512_loadu_ps(src + i)));
  for (; i < n; ++i) dst[i] = round_to_bf16(src[i]);
}

void accumulate_rounded(float* acc, const float* src, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 r = bf16_round(_mm512_loadu_ps(src + i));
    _mm512_storeu_ps(acc + i, _mm512_add_ps(_mm512_loadu_ps(acc + i), r));
  }
  for (; i < n; ++i) acc[i] += round_to_bf16(src[i]);
}

}  // namespace

const Bf16BulkFns kBf16BulkAvx512 = {from_f32, to_f32, round, accumulate_rounded};

}  // namespace zero::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options
#if defined(__clang__)
#pragma clang attribute pop
#endif
