// The dense layer's own CUDA kernels, around the cuBLASLt GEMMs of matmul_cuda.h: bias broadcast
// (when cuBLASLt's BIAS epilogue has no algorithm), GELU applied after the GEMM, and the bias
// gradient as a deterministic column sum. Legend: N = rows (B*T), OC = out_features; row-major.
// Launchers enqueue on `stream` only and never synchronise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace zero::kernels::cuda {

// out(N, OC) = bias(OC) on every row, or zeros when bias is null.
template <typename T>
void broadcast_bias(T* out, const T* bias, int64_t N, int64_t OC, cudaStream_t stream);

// out(n) = gelu_tanh(pre(n)) (gelu_math.h), fp32 math, rounded once to T. out may alias pre.
template <typename T>
void gelu_epilogue(T* out, const T* pre, int64_t n, cudaStream_t stream);

// How bias_grad splits the rows: `chunks` chunks of `rows_per_chunk` rows (the last may be short,
// none is empty) each write partial column sums to scratch, which a second kernel adds up in chunk
// order. chunks == 1 needs no scratch. A pure function of its arguments, so results are
// reproducible run to run.
struct BiasGradPlan {
  int64_t chunks = 1;
  int64_t rows_per_chunk = 0;
  size_t scratch_bytes = 0;  // chunks * OC floats when chunks > 1
};
BiasGradPlan bias_grad_plan(int64_t N, int64_t OC, size_t scratch_capacity_bytes);

// dbias(OC) += Σ_rows dout(N, OC), in fp32, deterministic (fixed summation order, no atomics).
// scratch: device memory of scratch_capacity_bytes, 4-byte aligned, not in use by other work on
// other streams; may be null when scratch_capacity_bytes is 0 (one chunk).
template <typename T>
void bias_grad(float* dbias, const T* dout, int64_t N, int64_t OC, void* scratch,
               size_t scratch_capacity_bytes, cudaStream_t stream);

}  // namespace zero::kernels::cuda
