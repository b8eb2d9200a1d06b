// RMSNorm over the last dim (Llama): out = inp * rsqrt(mean(inp²) + eps) * weight. Legend: N rows,
// C channels.
#pragma once

#include <cstdint>

namespace zero::kernels::cpu {

// Saves rstd(N) for backward. Overwrites out.
template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t N, int64_t C, T eps);

// Accumulates dinp(N, C) and dweight(C).
template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int64_t N, int64_t C);

}  // namespace zero::kernels::cpu
