// CPU twin of GELU, tanh approximation (HF "gelu_new"): y = 0.5 x (1 + tanh(u)),
// u = sqrt(2/pi) (x + 0.044715 x³). Elementwise over n, parallel over elements. fp32 runs the
// vectorised x · sigmoid(2u) form (kernels/vector_math.h); fp64 is the formula as written.
#include <cmath>
#include <cstdint>
#include <numbers>
#include <type_traits>

#include "kernels/gelu/gelu.h"
#include "kernels/vector_math.h"

namespace zero::kernels::cpu {
namespace {

template <typename T>
constexpr T kSqrt2OverPi = std::numbers::sqrt2_v<T>* std::numbers::inv_sqrtpi_v<T>;
template <typename T>
constexpr T kCubic = T(0.044715);

// Elements per OpenMP iteration of the vectorised fp32 loops.
constexpr int64_t kBlock = 4096;

}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const int64_t num_blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < num_blocks; ++blk) {
      const int64_t i = blk * kBlock;
      gelu_tanh_forward_f32(out + i, inp + i, n - i < kBlock ? n - i : kBlock);
    }
    return;
  }
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T u = kSqrt2OverPi<T> * (x + kCubic<T> * x * x * x);
    out[i] = T(0.5) * x * (T(1) + std::tanh(u));
  }
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n) {
  // gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh² u) du/dx, du/dx = sqrt(2/pi) (1 + 3 * 0.044715
  // x²).
  if constexpr (std::is_same_v<T, float>) {
    const int64_t num_blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < num_blocks; ++blk) {
      const int64_t i = blk * kBlock;
      gelu_tanh_backward_f32(dinp + i, inp + i, dout + i, n - i < kBlock ? n - i : kBlock);
    }
    return;
  }
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T u = kSqrt2OverPi<T> * (x + kCubic<T> * x * x * x);
    const T t = std::tanh(u);
    const T du_dx = kSqrt2OverPi<T> * (T(1) + T(3) * kCubic<T> * x * x);
    const T grad = T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du_dx;
    dinp[i] += grad * dout[i];
  }
}

template void gelu_forward<float>(float*, const float*, int64_t);
template void gelu_forward<double>(double*, const double*, int64_t);
template void gelu_backward<float>(float*, const float*, const float*, int64_t);
template void gelu_backward<double>(double*, const double*, const double*, int64_t);

}  // namespace zero::kernels::cpu
