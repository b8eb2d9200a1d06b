// Vectorised fp32 exp and the loops built on it (softmax rows, cross-entropy sums, GELU), with
// runtime dispatch: AVX-512 (16 lanes) or AVX2+FMA (8 lanes) when the CPU has them, else scalar
// std::exp / std::tanh. The AVX-512 and AVX2 paths run the same operations, so they agree bitwise.
//
// exp accuracy (vector_math_test.cc checks it against double over every 61st float of
// [-104, 89]): at most 2 ulp where the result is a normal float; results below FLT_MIN (x <
// -87.34) are within FLT_MIN of exp(x) absolute; x > 88.72 gives inf, x < -104 gives 0, NaN stays
// NaN. It is Cephes' expf: Cody-Waite reduction by ln 2, a degree-7 polynomial on [-ln2/2, ln2/2].
#pragma once

#include <cstdint>

namespace zero::kernels::cpu {

// out[i] = exp(x[i]) for i < n. out may alias x.
void vector_exp(float* out, const float* x, int64_t n);

// max over x[0, n) (n >= 1); -inf for n == 0. A NaN may or may not propagate (callers feed the
// result into exp sums, which a NaN input turns into NaN anyway).
float vector_max(const float* x, int64_t n);

// x[i] = exp(x[i] - shift) in place; returns Σ of the new x[i] (fp32 lane sums, then reduced).
float exp_shifted_sum_inplace(float* x, int64_t n, float shift);

// Σ exp(x[i] - shift) accumulated in double (the values are not stored).
double exp_shifted_sum_f64(const float* x, int64_t n, float shift);

// out[i] = exp(x[i] - shift) * scale. out may alias x.
void exp_shifted_scaled(float* out, const float* x, int64_t n, float shift, float scale);

// GELU, tanh approximation, y = 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x³), computed as
// the identical x · sigmoid(2u) = x / (1 + exp(-2u)) (no cancellation in 1 + tanh u for x < 0).
void gelu_tanh_forward_f32(float* out, const float* inp, int64_t n);
// dinp[i] += gelu'(inp[i]) * dout[i], gelu' = s + 2 x s (1 - s) du/dx with s = sigmoid(2u).
void gelu_tanh_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n);

}  // namespace zero::kernels::cpu

// One set of the functions above per instruction set, for the dispatcher and for tests that
// compare the paths. REQUIRES: the CPU has that instruction set (vector_isa_supported).
namespace zero::kernels::cpu::detail {

enum class VectorIsa { kScalar, kAvx2, kAvx512 };
bool vector_isa_supported(VectorIsa isa);

struct VectorMathFns {
  void (*exp)(float* out, const float* x, int64_t n);
  float (*max)(const float* x, int64_t n);
  float (*exp_shifted_sum_inplace)(float* x, int64_t n, float shift);
  double (*exp_shifted_sum_f64)(const float* x, int64_t n, float shift);
  void (*exp_shifted_scaled)(float* out, const float* x, int64_t n, float shift, float scale);
  void (*gelu_forward)(float* out, const float* inp, int64_t n);
  void (*gelu_backward)(float* dinp, const float* inp, const float* dout, int64_t n);
};
const VectorMathFns& vector_math_fns(VectorIsa isa);

extern const VectorMathFns kVectorMathAvx512;  // vector_math_avx512.cc
extern const VectorMathFns kVectorMathAvx2;    // vector_math_avx2.cc

}  // namespace zero::kernels::cpu::detail
