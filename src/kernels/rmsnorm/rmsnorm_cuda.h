// CUDA twin of RMSNorm over the last dim (rmsnorm.h, Llama): out = inp * rstd * weight with
// rstd = 1 / sqrt(mean(inp²) + eps). Legend: N rows, C channels. inp, out, dout, dinp (N, C) and
// weight (C) are stored in T (float, bf16, fp16); rstd (N) and dweight (C) are fp32; all arithmetic
// is fp32. Launchers enqueue on `stream` only, never synchronise and never allocate.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/rounded16.h"

namespace zero::kernels::cuda {

// out(N, C) = (inp * rstd) * weight (HF order), rounded once to T. Overwrites out; saves rstd(N)
// for backward (may be null when no backward follows). out must not alias inp.
// copy16 (optional): out also rounded into a 16-bit copy, rows copy16.ld apart, in the same pass.
// REQUIRES: C >= 1 when N > 0.
template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C,
                     float eps, cudaStream_t stream, Rounded16 copy16 = {});

// Device scratch rmsnorm_backward needs: fp32 (G, C) partial sums for dweight, G = min(ceil(N /
// 32), 128) row chunks.
size_t rmsnorm_backward_scratch_bytes(int64_t N, int64_t C);

// Accumulates, like the CPU twin:
//   dinp(N, C) += rstd * (dnorm - norm * mean(dnorm * norm)), norm = inp * rstd, dnorm = dout *
//                 weight (summed in fp32, rounded once to T);
//   dweight(C) += Σ_n dout * inp * rstd   (fp32).
// Deterministic: dweight is summed over fixed row chunks, then the chunks in order, so repeated
// calls give bitwise identical results. dinp must not alias dout or inp.
// REQUIRES: scratch_bytes >= rmsnorm_backward_scratch_bytes(N, C), scratch 4-byte aligned; C >= 1
// when N > 0; rstd as saved by rmsnorm_forward.
template <typename T>
void rmsnorm_backward(T* dinp, float* dweight, const T* dout, const T* inp, const T* weight,
                      const float* rstd, int64_t N, int64_t C, void* scratch, size_t scratch_bytes,
                      cudaStream_t stream);

}  // namespace zero::kernels::cuda
