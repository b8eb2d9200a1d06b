// AVX2 instance of dtype_simd.h (8 lanes of the scalar integer rounding in dtype.h, two registers
// per 16-bit store). Compiled for AVX2 by a target pragma so the rest of the build stays baseline
// x86-64; only called after dtype_isa_supported(kAvx2).
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/dtype_simd.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#endif
#pragma GCC push_options
#pragma GCC target("avx2")
#include <immintrin.h>

namespace zero::detail {
namespace {

// The 32-bit pattern whose upper half is float_to_bf16(x) (lower half: garbage below bit 16).
inline __m256i bf16_rounded_bits(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  // NaN: keep sign and payload, set the quiet bit (bit 6 of the bf16, bit 22 of the float).
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

inline __m256 bf16_round(__m256 x) {
  return _mm256_castsi256_ps(
      _mm256_and_si256(bf16_rounded_bits(x), _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

void from_f32(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = _mm256_srli_epi32(bf16_rounded_bits(_mm256_loadu_ps(src + i)), 16);
    const __m256i hi = _mm256_srli_epi32(bf16_rounded_bits(_mm256_loadu_ps(src + i + 8)), 16);
    // packus works per 128-bit lane: [lo0-3 hi0-3 | lo4-7 hi4-7]; the permute restores the order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  for (; i < n; ++i) dst[i] = float_to_bf16(src[i]).bits;
}

void to_f32(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i h =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
  }
  for (; i < n; ++i) dst[i] = bf16_to_float(bf16{src[i]});
}

void round(const float* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, bf16_round(_mm256_loadu_ps(src + i)));
  for (; i < n; ++i) dst[i] = round_to_bf16(src[i]);
}

void accumulate_rounded(float* acc, const float* src, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 r = bf16_round(_mm256_loadu_ps(src + i));
    _mm256_storeu_ps(acc + i, _mm256_add_ps(_mm256_loadu_ps(acc + i), r));
  }
  for (; i < n; ++i) acc[i] += round_to_bf16(src[i]);
}

}  // namespace

const Bf16BulkFns kBf16BulkAvx2 = {from_f32, to_f32, round, accumulate_rounded};

}  // namespace zero::detail

#pragma GCC pop_options
#if defined(__clang__)
#pragma clang attribute pop
#endif
