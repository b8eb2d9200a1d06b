// The CUDA model's own small kernels, the glue between the kernel library's ops: GPT-2's qkv split
// and merge (a strided column copy), a fill, and the loss sum that stays on the device. Legend:
// N rows. Launchers enqueue on `stream` only, never synchronise and never allocate.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace zero::model::cuda_glue {

// dst[n, 0:width] = src[n, 0:width] for n < N, where rows of dst are dst_row_stride floats apart
// and rows of src src_row_stride apart (e.g. q (N, C) = qkv (N, 3C)[:, 0:C], or back). dst must
// not overlap src.
void copy_columns(float* dst, int64_t dst_row_stride, const float* src, int64_t src_row_stride,
                  int64_t N, int64_t width, cudaStream_t stream);

// x(n) = value.
void fill(float* x, float value, int64_t n, cudaStream_t stream);

// *sum = Σ x(n) in fp64, one block, a fixed summation order (bitwise reproducible). Overwrites
// *sum.
void sum_to_f64(double* sum, const float* x, int64_t n, cudaStream_t stream);

}  // namespace zero::model::cuda_glue
