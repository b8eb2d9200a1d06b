// AVX-512 instance of vector_math_simd.h (16 fp32 lanes). Compiled for AVX-512 with a target
// pragma so the rest of the build stays baseline x86-64; only called after
// vector_isa_supported(kAvx512).
#include <cstdint>

#include "kernels/vector_math.h"

// Standard headers come first (a library inline compiled under the pragma could otherwise be
// picked by the linker for baseline code).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,avx2,fma"))), \
                             apply_to = function)
#endif
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx2,fma")
// GCC 12 reports its own _mm*_undefined_*() helpers as maybe-uninitialized (GCC PR 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

namespace zero::kernels::cpu::detail {
namespace {

struct Avx512 {
  using reg = __m512;
  static constexpr int64_t kLanes = 16;
  static reg load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, reg x) { _mm512_storeu_ps(p, x); }
  static reg set1(float x) { return _mm512_set1_ps(x); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm512_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm512_div_ps(a, b); }
  static reg fmadd(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg fnmadd(reg a, reg b, reg c) { return _mm512_fnmadd_ps(a, b, c); }
  static reg max(reg a, reg b) { return _mm512_max_ps(a, b); }
  static reg min(reg a, reg b) { return _mm512_min_ps(a, b); }
  static reg round(reg a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static reg pow2(reg p, reg n) {
    const __m512i ni = _mm512_cvtps_epi32(n);
    const __m512i n1 = _mm512_srai_epi32(ni, 1);
    const __m512i n2 = _mm512_sub_epi32(ni, n1);
    const __m512i bias = _mm512_set1_epi32(127);
    const reg s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    const reg s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
    return _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  }
  static float hsum(reg a) { return _mm512_reduce_add_ps(a); }
  static float hmax(reg a) { return _mm512_reduce_max_ps(a); }
  struct Acc64 {
    __m512d lo, hi;
  };
  static Acc64 acc64_zero() { return {_mm512_setzero_pd(), _mm512_setzero_pd()}; }
  static void acc64_add(Acc64& acc, reg x) {
    acc.lo = _mm512_add_pd(acc.lo, _mm512_cvtps_pd(_mm512_castps512_ps256(x)));
    acc.hi = _mm512_add_pd(acc.hi, _mm512_cvtps_pd(_mm512_extractf32x8_ps(x, 1)));
  }
  static double acc64_sum(const Acc64& acc) {
    return _mm512_reduce_add_pd(_mm512_add_pd(acc.lo, acc.hi));
  }
};

#include "kernels/vector_math_simd.h"

}  // namespace

const VectorMathFns kVectorMathAvx512 = {
    vector_exp_impl<Avx512>,
    vector_max_impl<Avx512>,
    exp_shifted_sum_inplace_impl<Avx512>,
    exp_shifted_sum_f64_impl<Avx512>,
    exp_shifted_scaled_impl<Avx512>,
    gelu_tanh_forward_impl<Avx512>,
    gelu_tanh_backward_impl<Avx512>,
};

}  // namespace zero::kernels::cpu::detail

#pragma GCC diagnostic pop
#pragma GCC pop_options
#if defined(__clang__)
#pragma clang attribute pop
#endif
