// CUDA sum of squares + non-finite flag, deterministic in two passes: a fixed grid (a function of
// n) writes one fp64 partial and one flag per block, then a single block adds the partials in a
// fixed order into the device totals. No atomics. Legend: n elements, G blocks of the first pass.

#include "kernels/norm/norm_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/launch.h"
#include "kernels/cuda_vector.cuh"

namespace zero::kernels::cuda {
namespace {

constexpr int kSumThreads = 256;
constexpr int kSumWarps = kSumThreads / 32;
constexpr int64_t kMinElementsPerBlock = int64_t{kSumThreads} * 16;
constexpr int64_t kMaxSumBlocks = 1024;  // ~8 blocks per SM on an H100: enough to saturate HBM

int64_t sum_blocks(int64_t n) {
  return std::clamp<int64_t>((n + kMinElementsPerBlock - 1) / kMinElementsPerBlock, 1,
                             kMaxSumBlocks);
}

// inf or NaN: all exponent bits set (a bit test, immune to fast-math flags).
__device__ __forceinline__ int is_nonfinite(float v) {
  return (__float_as_uint(v) & 0x7f800000u) == 0x7f800000u;
}

// Σ v over the block in a fixed order (butterfly in each warp, then warps 0..7 in order); the
// result is valid in thread 0 only. REQUIRES: blockDim.x == kSumThreads; warp_s is not reused
// before the next barrier.
__device__ double block_sum(double v, double* warp_s) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) warp_s[threadIdx.x / 32] = v;
  // Why: thread 0 reads every warp's sum.
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < kSumWarps; ++w) total += warp_s[w];
  }
  return total;
}

// Pass 1: block b writes partial_sq[b] = Σ x² over its grid-stride slice, partial_nonfinite[b].
// REQUIRES (kPack > 1): x aligned to kPack elements.
template <typename T, int kPack>
__global__ void __launch_bounds__(kSumThreads)
    sum_squares_partials_kernel(double* partial_sq, int* partial_nonfinite, const T* x, int64_t n) {
  __shared__ double warp_s[kSumWarps];
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kSumThreads + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kSumThreads;
  double acc = 0.0;  // a float's square is exact in fp64; only the additions round
  int nonfinite = 0;
  const int64_t num_packs = n / kPack;
  for (int64_t p = first; p < num_packs; p += stride) {
    float v[kPack];
    load_f32<kPack>(x + p * kPack, v);
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      const double d = v[k];
      acc += d * d;
      nonfinite |= is_nonfinite(v[k]);
    }
  }
  for (int64_t i = num_packs * kPack + first; i < n; i += stride) {  // fewer than kPack left
    const float v = to_f32(x[i]);
    const double d = v;
    acc += d * d;
    nonfinite |= is_nonfinite(v);
  }
  const double total = block_sum(acc, warp_s);
  const int any_nonfinite = __syncthreads_or(nonfinite);
  if (threadIdx.x == 0) {
    partial_sq[blockIdx.x] = total;
    partial_nonfinite[blockIdx.x] = any_nonfinite;
  }
}

// Pass 2 (one block): the G partials in a fixed order, added into the device totals.
__global__ void __launch_bounds__(kSumThreads)
    sum_squares_finish_kernel(double* sum_sq_dev, int* nonfinite_dev, const double* partial_sq,
                              const int* partial_nonfinite, int64_t G) {
  __shared__ double warp_s[kSumWarps];
  double acc = 0.0;
  int nonfinite = 0;
  for (int64_t g = threadIdx.x; g < G; g += kSumThreads) {
    acc += partial_sq[g];
    nonfinite |= partial_nonfinite[g];
  }
  const double total = block_sum(acc, warp_s);
  const int any_nonfinite = __syncthreads_or(nonfinite);
  if (threadIdx.x == 0) {
    *sum_sq_dev += total;
    if (any_nonfinite) *nonfinite_dev = 1;
  }
}

}  // namespace

size_t sum_squares_scratch_bytes(int64_t n) {
  return static_cast<size_t>(sum_blocks(n)) * (sizeof(double) + sizeof(int));
}

template <typename T>
void sum_squares_accumulate(const T* x, int64_t n, double* sum_sq_dev, int* nonfinite_dev,
                            void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  ZERO_CHECK(n >= 0, "sum_squares: negative n ", n);
  if (n == 0) return;
  ZERO_CHECK(scratch_bytes >= sum_squares_scratch_bytes(n), "sum_squares: scratch of ",
             scratch_bytes, " bytes < ", sum_squares_scratch_bytes(n));
  ZERO_CHECK(reinterpret_cast<uintptr_t>(scratch) % alignof(double) == 0,
             "sum_squares: misaligned scratch");
  const int64_t G = sum_blocks(n);
  auto* partial_sq = static_cast<double*>(scratch);                  // (G)
  auto* partial_nonfinite = reinterpret_cast<int*>(partial_sq + G);  // (G)
  constexpr int kPack = kVec16<T>;
  if (all_pack_aligned<kPack>(x)) {
    ZERO_LAUNCH(static_cast<unsigned>(G), kSumThreads, 0, stream,
                sum_squares_partials_kernel<T, kPack>)
    (partial_sq, partial_nonfinite, x, n);
  } else {
    ZERO_LAUNCH(static_cast<unsigned>(G), kSumThreads, 0, stream, sum_squares_partials_kernel<T, 1>)
    (partial_sq, partial_nonfinite, x, n);
  }
  CUDA_CHECK_LAUNCH();
  ZERO_LAUNCH(1, kSumThreads, 0, stream, sum_squares_finish_kernel)
  (sum_sq_dev, nonfinite_dev, partial_sq, partial_nonfinite, G);
  CUDA_CHECK_LAUNCH();
}

template void sum_squares_accumulate<float>(const float*, int64_t, double*, int*, void*, size_t,
                                            cudaStream_t);
template void sum_squares_accumulate<__nv_bfloat16>(const __nv_bfloat16*, int64_t, double*, int*,
                                                    void*, size_t, cudaStream_t);
template void sum_squares_accumulate<__half>(const __half*, int64_t, double*, int*, void*, size_t,
                                             cudaStream_t);

}  // namespace zero::kernels::cuda
