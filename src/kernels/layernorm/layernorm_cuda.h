// CUDA twin of LayerNorm over the last dim (layernorm.h). Legend: N rows, C channels.
// inp, out, dout, dinp (N, C) and weight, bias (C) are stored in T (float, bf16, fp16); mean, rstd
// (N) and the parameter gradients dweight, dbias (C) are fp32; all arithmetic is fp32. Launchers
// enqueue on `stream` only, never synchronise and never allocate.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/rounded16.h"

namespace zero::kernels::cuda {

// out(N, C) = (inp - mean) * rstd * weight + bias, rounded once to T (two-pass variance, as the
// CPU twin). Overwrites out; saves mean(N), rstd(N) for backward (either may be null when no
// backward follows). bias may be null. out must not alias inp.
// copy16 (optional): out also rounded into a 16-bit copy, rows copy16.ld apart, in the same pass.
// REQUIRES: C >= 1 when N > 0.
template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                       const T* bias, int64_t N, int64_t C, float eps, cudaStream_t stream,
                       Rounded16 copy16 = {});

// Device scratch layernorm_backward needs: fp32 (G, C) partial sums for dweight and for dbias,
// G = min(ceil(N / 32), 128) row chunks.
size_t layernorm_backward_scratch_bytes(int64_t N, int64_t C);

// Accumulates, like the CPU twin:
//   dinp(N, C)  += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * weight
//                  (summed in fp32, rounded once to T);
//   dweight(C)  += Σ_n dout * norm,  dbias(C) += Σ_n dout   (fp32; dbias may be null).
// Deterministic: the parameter gradients are summed over fixed row chunks, then the chunks in
// order, so repeated calls give bitwise identical results. dinp must not alias dout or inp.
// REQUIRES: scratch_bytes >= layernorm_backward_scratch_bytes(N, C), scratch 4-byte aligned;
// C >= 1 when N > 0; mean, rstd as saved by layernorm_forward.
template <typename T>
void layernorm_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                        const T* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                        void* scratch, size_t scratch_bytes, cudaStream_t stream);

}  // namespace zero::kernels::cuda
