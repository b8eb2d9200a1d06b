// Dispatch of vector_math.h: the widest instruction set the CPU has, else scalar std::exp.
#include "kernels/vector_math.h"

#include <cmath>
#include <limits>

namespace zero::kernels::cpu {
namespace detail {
namespace {

void exp_scalar(float* out, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(x[i]);
}
float max_scalar(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}
float exp_shifted_sum_inplace_scalar(float* x, int64_t n, float shift) {
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}
double exp_shifted_sum_f64_scalar(const float* x, int64_t n, float shift) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - shift);
  return sum;
}
void exp_shifted_scaled_scalar(float* out, const float* x, int64_t n, float shift, float scale) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(x[i] - shift) * scale;
}
float gelu_u(float x) { return 0.7978845608028654f * (x + 0.044715f * x * x * x); }
void gelu_forward_scalar(float* out, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = 0.5f * inp[i] * (1.0f + std::tanh(gelu_u(inp[i])));
}
void gelu_backward_scalar(float* dinp, const float* inp, const float* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i], t = std::tanh(gelu_u(x));
    const float du_dx = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] += (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du_dx) * dout[i];
  }
}

const VectorMathFns kVectorMathScalar = {
    exp_scalar,
    max_scalar,
    exp_shifted_sum_inplace_scalar,
    exp_shifted_sum_f64_scalar,
    exp_shifted_scaled_scalar,
    gelu_forward_scalar,
    gelu_backward_scalar,
};

}  // namespace

bool vector_isa_supported(VectorIsa isa) {
  // __builtin_cpu_supports also checks that the OS saves the YMM/ZMM state (XCR0).
  switch (isa) {
    case VectorIsa::kScalar: return true;
    case VectorIsa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case VectorIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("fma");
  }
  return false;
}

const VectorMathFns& vector_math_fns(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::kAvx512: return kVectorMathAvx512;
    case VectorIsa::kAvx2: return kVectorMathAvx2;
    case VectorIsa::kScalar: break;
  }
  return kVectorMathScalar;
}

}  // namespace detail

namespace {

const detail::VectorMathFns& best() {
  using detail::VectorIsa;
  if (detail::vector_isa_supported(VectorIsa::kAvx512)) {
    return detail::vector_math_fns(VectorIsa::kAvx512);
  }
  if (detail::vector_isa_supported(VectorIsa::kAvx2)) {
    return detail::vector_math_fns(VectorIsa::kAvx2);
  }
  return detail::vector_math_fns(VectorIsa::kScalar);
}

}  // namespace

void vector_exp(float* out, const float* x, int64_t n) { best().exp(out, x, n); }
float vector_max(const float* x, int64_t n) { return best().max(x, n); }
float exp_shifted_sum_inplace(float* x, int64_t n, float shift) {
  return best().exp_shifted_sum_inplace(x, n, shift);
}
double exp_shifted_sum_f64(const float* x, int64_t n, float shift) {
  return best().exp_shifted_sum_f64(x, n, shift);
}
void exp_shifted_scaled(float* out, const float* x, int64_t n, float shift, float scale) {
  best().exp_shifted_scaled(out, x, n, shift, scale);
}
void gelu_tanh_forward_f32(float* out, const float* inp, int64_t n) {
  best().gelu_forward(out, inp, n);
}
void gelu_tanh_backward_f32(float* dinp, const float* inp, const float* dout, int64_t n) {
  best().gelu_backward(dinp, inp, dout, n);
}

}  // namespace zero::kernels::cpu
