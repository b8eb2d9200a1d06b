// The CUDA model's glue kernels (cuda_transformer_kernels.h), written with ZERO_LAUNCH so that they
// also run on the CPU emulator (docs/emu.md).
#include "model/cuda_transformer_kernels.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/launch.h"

namespace zero::model::cuda_glue {
namespace {

constexpr int kThreads = 256;

// One block per row; the threads stride over its columns.
__global__ void copy_columns_kernel(float* dst, int64_t dst_row_stride, const float* src,
                                    int64_t src_row_stride, int64_t width) {
  const int64_t n = blockIdx.x;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    dst[n * dst_row_stride + i] = src[n * src_row_stride + i];
  }
}

__global__ void fill_kernel(float* x, float value, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = value;
}

// One block: thread t sums elements t, t + kThreads, ... in order, then a tree over the threads.
__global__ void sum_to_f64_kernel(double* sum, const float* x, int64_t n) {
  __shared__ double partial[kThreads];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) s += static_cast<double>(x[i]);
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *sum = partial[0];
}

}  // namespace

void copy_columns(float* dst, int64_t dst_row_stride, const float* src, int64_t src_row_stride,
                  int64_t N, int64_t width, cudaStream_t stream) {
  if (N == 0 || width == 0) return;
  const int threads = width < kThreads ? static_cast<int>((width + 31) / 32 * 32) : kThreads;
  ZERO_LAUNCH(dim3(static_cast<unsigned>(N)), dim3(threads), 0, stream, copy_columns_kernel)
  (dst, dst_row_stride, src, src_row_stride, width);
  CUDA_CHECK_LAUNCH();
}

void fill(float* x, float value, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  ZERO_LAUNCH(dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, fill_kernel)
  (x, value, n);
  CUDA_CHECK_LAUNCH();
}

void sum_to_f64(double* sum, const float* x, int64_t n, cudaStream_t stream) {
  ZERO_LAUNCH(dim3(1), dim3(kThreads), 0, stream, sum_to_f64_kernel)(sum, x, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace zero::model::cuda_glue
