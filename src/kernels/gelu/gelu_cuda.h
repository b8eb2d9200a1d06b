// CUDA twin of GELU (gelu.h), tanh approximation (HF "gelu_new"): values stored in T (float, bf16,
// fp16), all arithmetic in fp32, one rounding to T per output. Legend: n = elements. Launchers
// enqueue on `stream` only and never synchronise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/rounded16.h"

namespace zero::kernels::cuda {

// out(n) = gelu(inp). Overwrites out; out may alias inp. copy16 (optional): out also rounded into
// a 16-bit copy of its (n / copy16.width, copy16.width) rows, copy16.ld apart, in the same pass.
template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n, cudaStream_t stream, Rounded16 copy16 = {});

// Accumulates dinp(n) += gelu'(inp) * dout (the sum in fp32, rounded once to T).
template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, cudaStream_t stream);

}  // namespace zero::kernels::cuda
