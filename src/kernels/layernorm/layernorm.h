// LayerNorm over the last dim. Legend: N rows, C channels.
#pragma once

#include <cstdint>

namespace zero::kernels::cpu {

// out(N, C) = (inp - mean) * rstd * weight + bias; saves mean(N), rstd(N) for backward.
template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t N, int64_t C, T eps);

// Accumulates dinp, dweight, dbias (dbias may be null when the norm has no bias).
template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int64_t N, int64_t C);

}  // namespace zero::kernels::cpu
