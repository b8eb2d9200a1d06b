// SwiGLU (Llama MLP): out = silu(gate) * up, silu(x) = x * sigmoid(x). Elementwise over n.
#pragma once

#include <cstdint>

namespace zero::kernels::cpu {

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n);

// Accumulates dgate and dup.
template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n);

}  // namespace zero::kernels::cpu
