// Device helpers for the elementwise-style CUDA kernels (elementwise, gelu, swiglu, the dense
// layer's epilogues): storage <-> fp32 conversions, aligned vector packs, and one grid-stride
// launcher that uses vector accesses only when every pointer is aligned for them. Included only
// by .cu files (it needs nvcc).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/launch.h"
#include "kernels/rounded16.h"

namespace zero::kernels::cuda {

// Storage -> fp32 (exact) and fp32 -> storage (round to nearest even, in hardware).
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}

// Element `index` of a Rounded16 copy set to v, rounded to nearest even (from_f32's rounding: what
// the separate cast wrote).
__device__ __forceinline__ void store_rounded16(const Rounded16& r, int64_t index, float v) {
  if (r.bf16) {
    static_cast<__nv_bfloat16*>(r.data)[index] = from_f32<__nv_bfloat16>(v);
  } else {
    static_cast<__half*>(r.data)[index] = from_f32<__half>(v);
  }
}
// Where flat element j of (rows, width) data goes in a copy whose rows are ld apart.
__device__ __forceinline__ int64_t rounded16_index(const Rounded16& r, int64_t j) {
  return r.ld == r.width ? j : (j / r.width) * r.ld + j % r.width;
}

// kPack consecutive elements, aligned to their total size so that one load or store of a Pack is a
// single vector access (16 bytes at most).
template <typename T, int kPack>
struct alignas(sizeof(T) * kPack) Pack {
  T v[kPack];
};

// REQUIRES: p aligned to sizeof(T) * kPack.
template <int kPack, typename T>
__device__ __forceinline__ void load_f32(const T* p, float (&out)[kPack]) {
  const Pack<T, kPack> pack = *reinterpret_cast<const Pack<T, kPack>*>(p);
#pragma unroll
  for (int k = 0; k < kPack; ++k) out[k] = to_f32(pack.v[k]);
}

// REQUIRES: p aligned to sizeof(T) * kPack.
template <int kPack, typename T>
__device__ __forceinline__ void store_f32(T* p, const float (&in)[kPack]) {
  Pack<T, kPack> pack;
#pragma unroll
  for (int k = 0; k < kPack; ++k) pack.v[k] = from_f32<T>(in[k]);
  *reinterpret_cast<Pack<T, kPack>*>(p) = pack;
}

// Elements per 16-byte access of T.
template <typename T>
constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

// True when every pointer is aligned for kPack-element vector accesses of its own type.
template <int kPack, typename... Ts>
inline bool all_pack_aligned(const Ts*... ptrs) {
  return ((reinterpret_cast<uintptr_t>(ptrs) % (sizeof(Ts) * kPack) == 0) && ...);
}

inline constexpr int kElementwiseThreads = 256;
// Enough blocks to fill any current GPU many times; larger inputs loop (grid-stride).
inline constexpr int64_t kElementwiseMaxBlocks = int64_t{1} << 16;

// Calls op.apply<kPack>(i) for every i = 0, kPack, 2 kPack, ... below n - n % kPack (the pointers
// the op holds are kPack-aligned there), then op.apply<1>(i) for the last n % kPack elements.
// Each element is handled by exactly one thread, so ops may update in place (out aliasing an
// input at the same index).
template <int kPack, typename Op>
__global__ void __launch_bounds__(kElementwiseThreads) for_each_pack_kernel(int64_t n, Op op) {
  const int64_t num_packs = n / kPack;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = first; p < num_packs; p += stride) op.template apply<kPack>(p * kPack);
  if constexpr (kPack > 1) {
    const int64_t tail_begin = num_packs * kPack;
    if (first < n - tail_begin) op.template apply<1>(tail_begin + first);  // fewer than kPack
  }
}

template <int kPack, typename Op>
void launch_for_each_pack(int64_t n, const Op& op, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t work_items = std::max<int64_t>(n / kPack, 1);  // the tail needs one block
  const int64_t blocks = std::min<int64_t>(
      (work_items + kElementwiseThreads - 1) / kElementwiseThreads, kElementwiseMaxBlocks);
  ZERO_LAUNCH(static_cast<unsigned>(blocks), kElementwiseThreads, 0, stream,
              for_each_pack_kernel<kPack, Op>)
  (n, op);
  CUDA_CHECK_LAUNCH();
}

// Runs op over n elements with kPack-element vector accesses when all `ptrs` (every pointer the
// op touches) are aligned for them, element by element otherwise.
template <int kPack, typename Op, typename... Ts>
void launch_elementwise(int64_t n, const Op& op, cudaStream_t stream, const Ts*... ptrs) {
  if (all_pack_aligned<kPack>(ptrs...)) {
    launch_for_each_pack<kPack>(n, op, stream);
  } else {
    launch_for_each_pack<1>(n, op, stream);
  }
}

}  // namespace zero::kernels::cuda
