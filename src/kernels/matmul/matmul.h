// Dense layer: out = inp · weight^T + bias, weights in nn.Linear layout (out_features,
// in_features). GPT-2's Conv1D [in, out] weights are transposed at load/save time, so every model
// uses this layout. Legend: N = rows (B*T), C = in_features, OC = out_features.
#pragma once

#include <cstdint>

namespace zero::kernels::cpu {

// out(N, OC) = inp(N, C) · weight(OC, C)^T + bias(OC). bias may be null. Overwrites out.
template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C,
                    int64_t OC);

// Accumulates: dinp(N, C) += dout · weight; dweight(OC, C) += dout^T · inp; dbias(OC) += Σ_rows
// dout. Any of dinp / dweight / dbias may be null (not needed).
template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int64_t N, int64_t C, int64_t OC);

}  // namespace zero::kernels::cpu
