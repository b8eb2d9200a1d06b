// AVX-512 CPU Adam kernel (16 fp32 lanes). Compiled for AVX-512 with a target pragma so the rest
// of the build stays baseline x86-64; only called after cpu_isa_supported(kAvx512).
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/adamw/adamw_tile.h"

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
#pragma GCC diagnostic ignored "-Wuninitialized"  // the same PR, where the helper is inlined twice
#include <immintrin.h>

namespace zero::kernels::cpu::detail {
namespace {

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

// The 16-lane vector traits of the shared body (adamw_simd_body.h).
struct Avx512 {
  using reg = __m512;
  static constexpr int64_t kLanes = 16;
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg x) { _mm512_storeu_ps(p, x); }
  static void stream(float* p, reg x) { _mm512_stream_ps(p, x); }  // p 64-byte aligned
  static void fence() { _mm_sfence(); }
  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm512_div_ps(a, b); }
  static reg sqrt(reg a) { return _mm512_sqrt_ps(a); }
  // bf16 -> fp32 is exact: the 16 bits become the high half of the float.
  static reg load_bf16(const uint16_t* x) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static void store_bf16(uint16_t* out, reg x) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), to_bf16(x));
  }
  static void store_f16(uint16_t* out, reg x) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), to_f16(x));
  }
};

}  // namespace
}  // namespace zero::kernels::cpu::detail

#include "kernels/adamw/adamw_simd_body.h"

namespace zero::kernels::cpu::detail {

void adam_tile_avx512(const AdamConstants& c, const AdamShard& s, int64_t begin, int64_t end) {
  adam_tile<Avx512>(c, s, begin, end);
}

}  // namespace zero::kernels::cpu::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options
#if defined(__clang__)
#pragma clang attribute pop
#endif
