// CUDA twin of the global-norm pieces (norm.h): Σ x² in fp64 plus a non-finite flag in one pass,
// accumulated into device-resident totals so many buffers can be chained without a host sync.
// Legend: n elements. Launchers enqueue on `stream` only, never synchronise and never allocate.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace zero::kernels::cuda {

// Device scratch sum_squares_accumulate needs for n elements (per-block partials; at most 12 KiB).
size_t sum_squares_scratch_bytes(int64_t n);

// *sum_sq_dev += Σ x[i]² (each square exact in fp64, summed in fp64); *nonfinite_dev = 1 when any
// x[i] is inf or NaN (never cleared: the caller zeroes both totals when a step begins). x(n) is
// float, bf16 or fp16 (gradients, or 16-bit activations). n == 0 changes nothing.
// Deterministic: a fixed grid (a function of n and of whether x is 16-byte aligned) and fixed
// summation orders, so the same input adds bitwise the same value. Calls on one stream accumulate
// in stream order; the totals must not be updated concurrently from another stream.
// REQUIRES: scratch_bytes >= sum_squares_scratch_bytes(n), scratch 8-byte aligned and not in use
// by another stream; sum_sq_dev, nonfinite_dev device pointers.
template <typename T>
void sum_squares_accumulate(const T* x, int64_t n, double* sum_sq_dev, int* nonfinite_dev,
                            void* scratch, size_t scratch_bytes, cudaStream_t stream);

}  // namespace zero::kernels::cuda
