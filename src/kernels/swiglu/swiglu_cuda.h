// CUDA twin of SwiGLU (swiglu.h), the Llama MLP gate: out = silu(gate) * up. Values stored in T
// (float, bf16, fp16), all arithmetic in fp32, one rounding to T per output. Legend: n =
// elements. Launchers enqueue on `stream` only and never synchronise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/rounded16.h"

namespace zero::kernels::cuda {

// out(n) = silu(gate) * up. Overwrites out; out may alias gate or up. copy16 (optional): out also
// rounded into a 16-bit copy of its (n / copy16.width, copy16.width) rows, copy16.ld apart.
template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n, cudaStream_t stream,
                    Rounded16 copy16 = {});

// Accumulates dgate(n) += dout * up * silu'(gate) and dup(n) += dout * silu(gate) (each sum in
// fp32, rounded once to T). dgate and dup must be distinct arrays.
template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n,
                     cudaStream_t stream);

}  // namespace zero::kernels::cuda
