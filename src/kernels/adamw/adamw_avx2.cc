// AVX2 CPU Adam kernel (8 fp32 lanes, F16C for f16). Compiled for AVX2 with a target pragma so the
// rest of the build stays baseline x86-64; only called after cpu_isa_supported(kAvx2).
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/adamw/adamw_tile.h"

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

namespace zero::kernels::cpu::detail {
namespace {

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

// The 8-lane vector traits of the shared body (adamw_simd_body.h).
struct Avx2 {
  using reg = __m256;
  static constexpr int64_t kLanes = 8;
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg x) { _mm256_storeu_ps(p, x); }
  static void stream(float* p, reg x) { _mm256_stream_ps(p, x); }  // p 32-byte aligned
  static void fence() { _mm_sfence(); }
  static reg set1(float x) { return _mm256_set1_ps(x); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm256_div_ps(a, b); }
  static reg sqrt(reg a) { return _mm256_sqrt_ps(a); }
  // bf16 -> fp32 is exact: the 16 bits become the high half of the float.
  static reg load_bf16(const uint16_t* x) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static void store_bf16(uint16_t* out, reg x) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), to_bf16(x));
  }
  static void store_f16(uint16_t* out, reg x) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), to_f16(x));
  }
};

}  // namespace
}  // namespace zero::kernels::cpu::detail

#include "kernels/adamw/adamw_simd_body.h"

namespace zero::kernels::cpu::detail {

void adam_tile_avx2(const AdamConstants& c, const AdamShard& s, int64_t begin, int64_t end) {
  adam_tile<Avx2>(c, s, begin, end);
}

}  // namespace zero::kernels::cpu::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options
#if defined(__clang__)
#pragma clang attribute pop
#endif
