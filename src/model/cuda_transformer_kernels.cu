// The CUDA model's glue kernels (cuda_transformer_kernels.h), written with ZERO_LAUNCH so that they
// also run on the CPU emulator (docs/emu.md).
#include "model/cuda_transformer_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/launch.h"
#include "kernels/cuda_vector.cuh"

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

__global__ void add_scalar_kernel(float* out, const float* in, float value, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] + value;
}

__global__ void multiply_kernel(float* out, const float* a, const float* b, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * b[i];
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

template <typename T16>
__global__ void cast_rows_kernel(T16* dst, int64_t dst_ld, const float* src, int64_t src_ld,
                                 int64_t width) {
  const int64_t n = blockIdx.x;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    dst[n * dst_ld + i] = kernels::cuda::from_f32<T16>(src[n * src_ld + i]);
  }
}

// blockIdx.y: the segment; the x blocks stride over its elements.
template <typename T16>
__global__ void widen_segments_kernel(float* dst, const T16* src, WidenSegments segments) {
  const int s = static_cast<int>(blockIdx.y);
  const int64_t numel = segments.numel[s];
  const T16* from = src + segments.src_offset[s];
  float* to = dst + segments.dst_offset[s];
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    to[i] = kernels::cuda::to_f32(from[i]);
  }
}

// One block per position (b, t), as encoder_forward_kernel.
template <typename T16>
__global__ void embed_16_kernel(float* out, const int32_t* tokens, const T16* wte, const T16* wpe,
                                int64_t T, int64_t C, int64_t V) {
  const int64_t bt = blockIdx.x;
  const int32_t token = tokens[bt];
  const bool valid = token >= 0 && token < V;
  const T16* wte_C = wte + (valid ? token : 0) * C;
  const T16* wpe_C = wpe != nullptr ? wpe + (bt % T) * C : nullptr;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float y = NAN;
    if (valid) {
      y = kernels::cuda::to_f32(wte_C[c]);
      if (wpe_C != nullptr) y += kernels::cuda::to_f32(wpe_C[c]);
    }
    out[bt * C + c] = y;
  }
}

int threads_for(int64_t width) {
  return width < kThreads ? static_cast<int>((width + 31) / 32 * 32) : kThreads;
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

void add_scalar(float* out, const float* in, float value, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  ZERO_LAUNCH(dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, add_scalar_kernel)
  (out, in, value, n);
  CUDA_CHECK_LAUNCH();
}

void multiply(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  ZERO_LAUNCH(dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, multiply_kernel)
  (out, a, b, n);
  CUDA_CHECK_LAUNCH();
}

void sum_to_f64(double* sum, const float* x, int64_t n, cudaStream_t stream) {
  ZERO_LAUNCH(dim3(1), dim3(kThreads), 0, stream, sum_to_f64_kernel)(sum, x, n);
  CUDA_CHECK_LAUNCH();
}

template <typename T16>
void cast_rows(T16* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t N, int64_t width,
               cudaStream_t stream) {
  if (N == 0 || width == 0) return;
  ZERO_LAUNCH(dim3(static_cast<unsigned>(N)), dim3(threads_for(width)), 0, stream,
              cast_rows_kernel<T16>)
  (dst, dst_ld, src, src_ld, width);
  CUDA_CHECK_LAUNCH();
}
template void cast_rows<__nv_bfloat16>(__nv_bfloat16*, int64_t, const float*, int64_t, int64_t,
                                       int64_t, cudaStream_t);
template void cast_rows<__half>(__half*, int64_t, const float*, int64_t, int64_t, int64_t,
                                cudaStream_t);

void widen_segments(float* dst, const void* src, DType src_dtype, const WidenSegments& segments,
                    cudaStream_t stream) {
  if (segments.count == 0) return;
  ZERO_CHECK(segments.count <= kMaxWidenSegments, "widen_segments: ", segments.count, " segments");
  int64_t largest = 0;
  for (int s = 0; s < segments.count; ++s) largest = std::max(largest, segments.numel[s]);
  const int64_t blocks =
      std::max<int64_t>(1, std::min<int64_t>((largest + kThreads - 1) / kThreads, 64));
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(segments.count));
  if (src_dtype == DType::kBF16) {
    ZERO_LAUNCH(grid, dim3(kThreads), 0, stream, widen_segments_kernel<__nv_bfloat16>)
    (dst, static_cast<const __nv_bfloat16*>(src), segments);
  } else {
    ZERO_CHECK(src_dtype == DType::kF16, "widen_segments: not a 16-bit dtype");
    ZERO_LAUNCH(grid, dim3(kThreads), 0, stream, widen_segments_kernel<__half>)
    (dst, static_cast<const __half*>(src), segments);
  }
  CUDA_CHECK_LAUNCH();
}

void embed_16(float* out, const int32_t* tokens, const void* wte, const void* wpe, DType dtype,
              int64_t B, int64_t T, int64_t C, int64_t V, cudaStream_t stream) {
  if (B * T == 0 || C == 0) return;
  const dim3 grid(static_cast<unsigned>(B * T)), block(threads_for(C));
  if (dtype == DType::kBF16) {
    ZERO_LAUNCH(grid, block, 0, stream, embed_16_kernel<__nv_bfloat16>)
    (out, tokens, static_cast<const __nv_bfloat16*>(wte), static_cast<const __nv_bfloat16*>(wpe), T,
     C, V);
  } else {
    ZERO_CHECK(dtype == DType::kF16, "embed_16: not a 16-bit dtype");
    ZERO_LAUNCH(grid, block, 0, stream, embed_16_kernel<__half>)
    (out, tokens, static_cast<const __half*>(wte), static_cast<const __half*>(wpe), T, C, V);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace zero::model::cuda_glue
