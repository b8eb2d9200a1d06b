// CUDA softmax cross-entropy: one block per row, an online (max, Σexp) pass over the vocabulary in
// fp32, a block reduction, then (for the gradient) a second pass that writes softmax - onehot.
// Legend: N positions (B*T), V vocab. logits/dlogits (N, V); targets, losses, dloss (N).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/launch.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/cross_entropy/cross_entropy_cuda.h"
#include "kernels/cuda_vector.cuh"

namespace zero::kernels::cuda {
namespace {

// Pack (kernels/cuda_vector.cuh): kPack consecutive elements moved by one vector access.

constexpr int kMaxThreads = 512;
constexpr int kMaxWarps = kMaxThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;

// Running softmax statistics of a set of logits: max and Σ exp(x - max). The empty set is
// {-inf, 0}. A NaN logit makes sum NaN, which then survives every merge.
struct MaxSum {
  float max;
  float sum;
};

__device__ __forceinline__ void add_logit(MaxSum& acc, float x) {
  if (x > acc.max) {
    acc.sum = acc.sum * expf(acc.max - x) + 1.0f;  // exp(-inf) = 0 for the first element
    acc.max = x;
  } else if (x != -INFINITY) {  // a -inf logit adds nothing (and -inf - -inf would be NaN)
    acc.sum += expf(x - acc.max);
  }
}

// Symmetric in a and b bit for bit (explicit roundings, no contraction into an fma), so every lane
// of a butterfly reduction ends with the same statistics.
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, __fadd_rn(__fmul_rn(a.sum, expf(a.max - m)), __fmul_rn(b.sum, expf(b.max - m)))};
}

__device__ __forceinline__ MaxSum warp_merge(MaxSum v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const MaxSum o{__shfl_xor_sync(kFullMask, v.max, offset),
                   __shfl_xor_sync(kFullMask, v.sum, offset)};
    v = merge(v, o);
  }
  return v;
}

// Every thread of the block gets the row's statistics. REQUIRES: blockDim.x a multiple of 32, at
// most kMaxThreads; called once per block (warp_s is not reused).
__device__ MaxSum block_merge(MaxSum v, MaxSum* warp_s) {
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  v = warp_merge(v);
  if (lane == 0) warp_s[warp] = v;
  // Why: every warp's partial must be in shared memory before any warp combines them; this is
  // also the point after which no thread reads the row's logits again in pass 1.
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? warp_s[lane] : MaxSum{-INFINITY, 0.0f};
  return warp_merge(v);  // each warp combines all partials itself: no second broadcast needed
}

template <int kPack, typename T>
__device__ __forceinline__ void load_pack(const T* p, float (&x)[kPack]) {
  const Pack<T, kPack> pack = *reinterpret_cast<const Pack<T, kPack>*>(p);
#pragma unroll
  for (int k = 0; k < kPack; ++k) x[k] = to_f32(pack.v[k]);
}

// One vector access when kVector (REQUIRES: p aligned to sizeof(T) * kPack; a narrower T than the
// logits' is aligned less), element by element otherwise.
template <bool kVector, int kPack, typename T>
__device__ __forceinline__ void store_pack(T* p, const float (&x)[kPack]) {
  if constexpr (kVector) {
    Pack<T, kPack> pack;
#pragma unroll
    for (int k = 0; k < kPack; ++k) pack.v[k] = from_f32<T>(x[k]);
    *reinterpret_cast<Pack<T, kPack>*>(p) = pack;
  } else {
#pragma unroll
    for (int k = 0; k < kPack; ++k) p[k] = from_f32<T>(x[k]);
  }
}

// One block per row n = blockIdx.x (logits rows logits_ld elements apart). Writes losses[n] when
// losses != nullptr; writes the gradient row, rounded to TOut (the fp32 value, then one round to
// nearest even), into dlogits (rows dlogits_ld elements apart) when dlogits != nullptr, scaled by
// dloss_N[n] (or dloss_const when dloss_N is null). dlogits may alias logits (TOut = T, dlogits_ld
// = V): every logit of the row is read (pass 1 and the target logit) before block_merge's barrier,
// and in pass 2 each thread reads only the elements it writes. The logits' layout alone picks
// kPack, so the summation order, hence every bit of the loss and gradient, does not depend on where
// the gradient goes: a misaligned dlogits only stores element by element (kVectorStore false).
// The row is read in packs up to V rounded down to kPack; the < kPack elements left are one per
// thread (threads 0.., scalar), added after its packs.
// REQUIRES: logits_ld % kPack == 0, logits aligned to kPack elements; with kVectorStore also
// dlogits_ld % kPack == 0 and dlogits aligned to kPack elements.
// softcap > 0: each gradient element is also multiplied by 1 - (L / softcap)^2, L its logit (the
// capped one: cross_entropy_backward's contract); a uniform branch, untaken when 0.
template <typename T, typename TOut, int kPack, bool kVectorStore>
__global__ void cross_entropy_kernel(float* losses, TOut* dlogits, int64_t dlogits_ld,
                                     const T* logits, int64_t logits_ld, const int32_t* targets,
                                     const float* dloss_N, float dloss_const, int64_t V,
                                     float softcap) {
  __shared__ MaxSum warp_s[kMaxWarps];
  const int64_t n = blockIdx.x;
  const int32_t target = targets[n];
  const T* logits_V = logits + n * logits_ld;
  TOut* dlogits_V = dlogits == nullptr ? nullptr : dlogits + n * dlogits_ld;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * kPack;
  const int64_t V_main = V / kPack * kPack;
  const int64_t tail = V_main + threadIdx.x;  // this thread's element past the packs, if < V

  const bool ignored = target == cpu::kIgnoreIndex;
  const bool valid = target >= 0 && target < V;
  if (!valid) {  // block-uniform branch: no barrier is skipped by part of the block
    const float fill = ignored ? 0.0f : NAN;
    if (losses != nullptr && threadIdx.x == 0) losses[n] = fill;
    if (dlogits_V != nullptr) {
      for (int64_t i = threadIdx.x * int64_t{kPack}; i < V_main; i += stride) {
        float g[kPack];
#pragma unroll
        for (int k = 0; k < kPack; ++k) g[k] = fill;
        store_pack<kVectorStore>(dlogits_V + i, g);
      }
      if (tail < V) dlogits_V[tail] = from_f32<TOut>(fill);
    }
    return;
  }

  // Pass 1: per-thread online statistics over a strided slice of the row, then the whole row.
  MaxSum acc{-INFINITY, 0.0f};
  for (int64_t i = threadIdx.x * int64_t{kPack}; i < V_main; i += stride) {
    float x[kPack];
    load_pack<kPack>(logits_V + i, x);
#pragma unroll
    for (int k = 0; k < kPack; ++k) add_logit(acc, x[k]);
  }
  if (tail < V) add_logit(acc, to_f32(logits_V[tail]));
  // Read before block_merge's barrier, i.e. before any thread overwrites the row in place.
  const float target_logit = threadIdx.x == 0 ? to_f32(logits_V[target]) : 0.0f;
  const MaxSum row = block_merge(acc, warp_s);

  if (losses != nullptr && threadIdx.x == 0) {
    // (max - x_target) first: exact-ish when both are large, so small losses keep their digits.
    losses[n] = logf(row.sum) + (row.max - target_logit);
  }
  if (dlogits_V == nullptr) return;

  // Pass 2: dlogits = softmax * dloss - onehot * dloss.
  const float dloss = dloss_N != nullptr ? dloss_N[n] : dloss_const;
  const float scale = dloss / row.sum;
  for (int64_t i = threadIdx.x * int64_t{kPack}; i < V_main; i += stride) {
    float x[kPack];
    load_pack<kPack>(logits_V + i, x);
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      const float logit = x[k];
      x[k] = expf(logit - row.max) * scale;
      if (i + k == target) x[k] -= dloss;
      if (softcap > 0) x[k] *= 1.0f - (logit / softcap) * (logit / softcap);
    }
    store_pack<kVectorStore>(dlogits_V + i, x);
  }
  if (tail < V) {
    const float logit = to_f32(logits_V[tail]);
    float x = expf(logit - row.max) * scale;
    if (tail == target) x -= dloss;
    if (softcap > 0) x *= 1.0f - (logit / softcap) * (logit / softcap);
    dlogits_V[tail] = from_f32<TOut>(x);
  }
}

// One block per row n = blockIdx.x: logits[n, 0:V] = softcap * tanh(logits / softcap).
__global__ void softcap_logits_kernel(float* logits, int64_t logits_ld, int64_t V, float softcap) {
  float* row = logits + static_cast<int64_t>(blockIdx.x) * logits_ld;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) row[i] = softcap * tanhf(row[i] / softcap);
}

bool aligned_to(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Picks 16-byte vector loads of the logits when every row starts 16-byte aligned (a row stride
// that is a multiple of the pack and an aligned base pointer; a V that is not gets a scalar tail),
// scalar ones otherwise; vector stores of the gradient when
// its rows are aligned for as many TOut elements too. One block per row.
template <typename T, typename TOut = T>
void launch_cross_entropy(float* losses, TOut* dlogits, int64_t dlogits_ld, const T* logits,
                          int64_t logits_ld, const int32_t* targets, const float* dloss_N,
                          float dloss_const, int64_t N, int64_t V, cudaStream_t stream,
                          float softcap = 0.0f) {
  ZERO_CHECK(V > 0, "cross_entropy: empty vocabulary");
  ZERO_CHECK(softcap >= 0, "cross_entropy: softcap ", softcap, " < 0");
  ZERO_CHECK(N >= 0 && N <= std::numeric_limits<int>::max(), "cross_entropy: bad row count ", N);
  ZERO_CHECK(dlogits_ld >= V, "cross_entropy: gradient row stride ", dlogits_ld, " < V ", V);
  ZERO_CHECK(logits_ld >= V, "cross_entropy: logits row stride ", logits_ld, " < V ", V);
  if (N == 0) return;
  constexpr int kVec = static_cast<int>(16 / sizeof(T));
  const bool vectorized = logits_ld % kVec == 0 && aligned_to(logits, 16);
  const bool vector_store =
      dlogits == nullptr || (dlogits_ld % kVec == 0 && aligned_to(dlogits, sizeof(TOut) * kVec));
  const int64_t packs_per_row = vectorized ? (V + kVec - 1) / kVec : V;
  // Whole warps, enough to give each thread a few packs of a large row, one warp for tiny rows.
  const int threads =
      static_cast<int>(std::min<int64_t>(kMaxThreads, (packs_per_row + 31) / 32 * 32));
  const auto grid = static_cast<unsigned>(N);
  if (vectorized && vector_store) {
    ZERO_LAUNCH(grid, threads, 0, stream, cross_entropy_kernel<T, TOut, kVec, true>)
    (losses, dlogits, dlogits_ld, logits, logits_ld, targets, dloss_N, dloss_const, V, softcap);
  } else if (vectorized) {
    ZERO_LAUNCH(grid, threads, 0, stream, cross_entropy_kernel<T, TOut, kVec, false>)
    (losses, dlogits, dlogits_ld, logits, logits_ld, targets, dloss_N, dloss_const, V, softcap);
  } else {
    ZERO_LAUNCH(grid, threads, 0, stream, cross_entropy_kernel<T, TOut, 1, true>)
    (losses, dlogits, dlogits_ld, logits, logits_ld, targets, dloss_N, dloss_const, V, softcap);
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void cross_entropy_forward(float* losses, const T* logits, int64_t logits_ld,
                           const int32_t* targets, int64_t N, int64_t V, cudaStream_t stream) {
  launch_cross_entropy<T, T>(losses, nullptr, V, logits, logits_ld, targets, nullptr, 0.0f, N, V,
                             stream);
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const int32_t* targets, const float* dloss,
                            int64_t N, int64_t V, cudaStream_t stream, float softcap) {
  launch_cross_entropy<T>(nullptr, dlogits, V, logits, V, targets, dloss, 0.0f, N, V, stream,
                          softcap);
}

template <typename T16>
void cross_entropy_backward_16(T16* dlogits16, int64_t dlogits_ld, const float* logits,
                               int64_t logits_ld, const int32_t* targets, const float* dloss,
                               int64_t N, int64_t V, cudaStream_t stream, float softcap) {
  launch_cross_entropy<float, T16>(nullptr, dlogits16, dlogits_ld, logits, logits_ld, targets,
                                   dloss, 0.0f, N, V, stream, softcap);
}

void softcap_logits(float* logits, int64_t logits_ld, int64_t N, int64_t V, float softcap,
                    cudaStream_t stream) {
  ZERO_CHECK(softcap > 0, "softcap_logits: softcap ", softcap, " <= 0");
  ZERO_CHECK(N >= 0 && N <= std::numeric_limits<int>::max() && logits_ld >= V, "softcap_logits: N ",
             N, " V ", V, " row stride ", logits_ld);
  if (N == 0 || V == 0) return;
  const int threads = static_cast<int>(std::min<int64_t>(kMaxThreads, (V + 31) / 32 * 32));
  ZERO_LAUNCH(static_cast<unsigned>(N), threads, 0, stream, softcap_logits_kernel)
  (logits, logits_ld, V, softcap);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void cross_entropy_fused(float* losses, T* logits_inout, const int32_t* targets,
                         float dloss_per_token, int64_t N, int64_t V, cudaStream_t stream) {
  launch_cross_entropy<T>(losses, logits_inout, V, logits_inout, V, targets, nullptr,
                          dloss_per_token, N, V, stream);
}

#define ZERO_INSTANTIATE_CROSS_ENTROPY_CUDA(T)                                                 \
  template void cross_entropy_forward<T>(float*, const T*, int64_t, const int32_t*, int64_t,   \
                                         int64_t, cudaStream_t);                               \
  template void cross_entropy_backward<T>(T*, const T*, const int32_t*, const float*, int64_t, \
                                          int64_t, cudaStream_t, float);                       \
  template void cross_entropy_fused<T>(float*, T*, const int32_t*, float, int64_t, int64_t,    \
                                       cudaStream_t);
ZERO_INSTANTIATE_CROSS_ENTROPY_CUDA(float)
ZERO_INSTANTIATE_CROSS_ENTROPY_CUDA(__nv_bfloat16)
ZERO_INSTANTIATE_CROSS_ENTROPY_CUDA(__half)
#undef ZERO_INSTANTIATE_CROSS_ENTROPY_CUDA
template void cross_entropy_backward_16<__nv_bfloat16>(__nv_bfloat16*, int64_t, const float*,
                                                       int64_t, const int32_t*, const float*,
                                                       int64_t, int64_t, cudaStream_t, float);
template void cross_entropy_backward_16<__half>(__half*, int64_t, const float*, int64_t,
                                                const int32_t*, const float*, int64_t, int64_t,
                                                cudaStream_t, float);

}  // namespace zero::kernels::cuda
