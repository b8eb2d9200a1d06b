// AVX2+FMA instance of vector_math_simd.h (8 fp32 lanes). Compiled for AVX2 with a target pragma
// so the rest of the build stays baseline x86-64; only called after
// vector_isa_supported(kAvx2).
#include <cstdint>

#include "kernels/vector_math.h"

// Standard headers come first (a library inline compiled under the pragma could otherwise be
// picked by the linker for baseline code).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#endif
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#include <immintrin.h>

namespace zero::kernels::cpu::detail {
namespace {

struct Avx2 {
  using reg = __m256;
  static constexpr int64_t kLanes = 8;
  static reg load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, reg x) { _mm256_storeu_ps(p, x); }
  static reg set1(float x) { return _mm256_set1_ps(x); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static reg sub(reg a, reg b) { return _mm256_sub_ps(a, b); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg div(reg a, reg b) { return _mm256_div_ps(a, b); }
  static reg fmadd(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg fnmadd(reg a, reg b, reg c) { return _mm256_fnmadd_ps(a, b, c); }
  static reg max(reg a, reg b) { return _mm256_max_ps(a, b); }
  static reg min(reg a, reg b) { return _mm256_min_ps(a, b); }
  static reg round(reg a) {
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static reg pow2(reg p, reg n) {
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i n1 = _mm256_srai_epi32(ni, 1);
    const __m256i n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const reg s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const reg s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  }
  static float hsum(reg a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hmax(reg a) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  struct Acc64 {
    __m256d lo, hi;
  };
  static Acc64 acc64_zero() { return {_mm256_setzero_pd(), _mm256_setzero_pd()}; }
  static void acc64_add(Acc64& acc, reg x) {
    acc.lo = _mm256_add_pd(acc.lo, _mm256_cvtps_pd(_mm256_castps256_ps128(x)));
    acc.hi = _mm256_add_pd(acc.hi, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
  }
  static double acc64_sum(const Acc64& acc) {
    double lanes[4];
    _mm256_storeu_pd(lanes, _mm256_add_pd(acc.lo, acc.hi));
    return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  }
};

#include "kernels/vector_math_simd.h"

}  // namespace

const VectorMathFns kVectorMathAvx2 = {
    vector_exp_impl<Avx2>,
    vector_max_impl<Avx2>,
    exp_shifted_sum_inplace_impl<Avx2>,
    exp_shifted_sum_f64_impl<Avx2>,
    exp_shifted_scaled_impl<Avx2>,
    gelu_tanh_forward_impl<Avx2>,
    gelu_tanh_backward_impl<Avx2>,
};

}  // namespace zero::kernels::cpu::detail

#pragma GCC pop_options
#if defined(__clang__)
#pragma clang attribute pop
#endif
