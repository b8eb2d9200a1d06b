// CPU twin of SwiGLU (Llama MLP): out = silu(gate) * up, silu(x) = x * sigmoid(x).
// Elementwise over n, parallel over elements.
#include <cmath>
#include <cstdint>

#include "kernels/swiglu/swiglu.h"

namespace zero::kernels::cpu {
namespace {

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

}  // namespace

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    const T g = gate[i];
    out[i] = g * sigmoid(g) * up[i];
  }
}

template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n) {
  // silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    const T g = gate[i];
    const T sig = sigmoid(g);
    const T silu = g * sig;
    dgate[i] += dout[i] * up[i] * sig * (T(1) + g * (T(1) - sig));
    dup[i] += dout[i] * silu;
  }
}

template void swiglu_forward<float>(float*, const float*, const float*, int64_t);
template void swiglu_forward<double>(double*, const double*, const double*, int64_t);
template void swiglu_backward<float>(float*, float*, const float*, const float*, const float*,
                                     int64_t);
template void swiglu_backward<double>(double*, double*, const double*, const double*, const double*,
                                      int64_t);

}  // namespace zero::kernels::cpu
