// Dense layer: out = inp · weight^T + bias, weights in nn.Linear layout (out_features,
// in_features). GPT-2's Conv1D [in, out] weights are transposed at load/save time, so every model
// uses this layout. Legend: N = rows (B*T), C = in_features, OC = out_features.
#pragma once

#include <cstdint>

namespace zero::kernels::cpu {

class Bf16Gemm;

// out(N, OC) = inp(N, C) · weight(OC, C)^T + bias(OC). bias may be null. Overwrites out.
// With bf16_gemm (fp32 only), the GEMMs take bf16-rounded inputs and accumulate in fp32
// (bf16_gemm.h); without it they are OpenBLAS sgemm / dgemm.
template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C,
                    int64_t OC, Bf16Gemm* bf16_gemm = nullptr);

// Accumulates: dinp(N, C) += dout · weight; dweight(OC, C) += dout^T · inp; dbias(OC) += Σ_rows
// dout. Any of dinp / dweight / dbias may be null (not needed).
// bf16_gemm as in matmul_forward (dbias is always summed in fp32).
template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int64_t N, int64_t C, int64_t OC, Bf16Gemm* bf16_gemm = nullptr);

}  // namespace zero::kernels::cpu
