// GELU, tanh approximation (HF "gelu_new" / "gelu_pytorch_tanh"):
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³))).
#pragma once

#include <cstdint>

namespace zero::kernels::cpu {

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n);

// Accumulates dinp += gelu'(inp) * dout.
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n);

}  // namespace zero::kernels::cpu
