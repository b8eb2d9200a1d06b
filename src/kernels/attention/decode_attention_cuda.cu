// decode_attention (decode_attention_cuda.h): one block of kThreads threads per (new row, query
// head, split of its keys), and with several splits a combine kernel over their partials. Legend: n
// new rows, Hq / Hkv heads, G = Hq / Hkv, D head dim, P cached positions before the new rows. Keys
// stream in chunks of kThreads: thread t scores key t of the chunk on its own (its dot product over
// D in order, independent loads), the block reduces the chunk's max and sum, then every thread
// rescales its output columns d = t, t + kThreads by the new running max and adds the chunk's
// probabilities times v (reads of v coalesced across threads).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/launch.h"
#include "kernels/attention/attention_internal_cuda.cuh"
#include "kernels/attention/decode_attention_cuda.h"
#include "kernels/cuda_vector.cuh"

namespace zero::kernels::cuda {
namespace {

constexpr int kLanes = 32;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kLanes;  // also the keys per chunk
constexpr int kMaxHeadDim = 256;
constexpr int kColsPerThread = kMaxHeadDim / kThreads;  // output columns a thread owns
// Split the keys over more blocks until about this many run (flash-decoding): one new row has only
// Hq (row, head) blocks, too few to read a long cache at the GPU's bandwidth.
constexpr int64_t kSplitBlocks = 1024;

// Key splits per (row, head) for n rows after P cached positions: one per chunk of the longest
// row's keys, while n * Hq * splits stays within kSplitBlocks.
int64_t key_splits(int64_t n, int64_t P, int64_t Hq, int64_t window) {
  const int64_t keys = window > 0 ? std::min(P + n, window) : P + n;
  const int64_t chunks = (keys + kThreads - 1) / kThreads;
  return std::max<int64_t>(1, std::min(chunks, kSplitBlocks / (n * Hq)));
}

// The warp reductions of the training kernels (butterflies: every lane ends with the same bits).
using attention_internal::warp_max;
using attention_internal::warp_sum;

// Block (i * Hq + h, split): query row i, head h, the split's share of the row's keys. Every thread
// keeps the same running max and sum (it reads the same shared partials), and its own output
// columns. One split writes y; several write their (max, sum, D unnormalised outputs) to
// partial (n * Hq, splits, D + 2) for decode_attention_combine_kernel (an empty share: -inf, 0, 0).
// T: the cache's element type (float, or __nv_bfloat16 widened to fp32 as it is read).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    decode_attention_kernel(float* y, float* partial, const float* q, const T* k_cache,
                            const T* v_cache, int Hq, int Hkv, int D, int P, float scale,
                            int window, float softcap) {
  __shared__ float q_s[kMaxHeadDim];
  __shared__ float p_s[kThreads];                 // the chunk's probabilities (unnormalised)
  __shared__ float max_s[kWarps], sum_s[kWarps];  // per-warp partials of the chunk
  const int i = static_cast<int>(blockIdx.x) / Hq, h = static_cast<int>(blockIdx.x) % Hq;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kLanes, warp = tid / kLanes;
  const int64_t kv_stride = static_cast<int64_t>(Hkv) * D;  // elements per cached position
  const T* k_head = k_cache + static_cast<int64_t>(h / (Hq / Hkv)) * D;
  const T* v_head = v_cache + static_cast<int64_t>(h / (Hq / Hkv)) * D;
  const float* q_row = q + (static_cast<int64_t>(i) * Hq + h) * D;
  for (int d = tid; d < D; d += kThreads) q_s[d] = q_row[d];

  const int keys = P + i + 1;  // causal: positions [0, P + i]
  const int first = window > 0 && keys > window ? keys - window : 0;
  const int splits = static_cast<int>(gridDim.y), split = static_cast<int>(blockIdx.y);
  const int span = (keys - first + splits - 1) / splits;
  const int lo = min(keys, first + split * span), hi = min(keys, lo + span);
  float running_max = -INFINITY, running_sum = 0.0f;
  float acc[kColsPerThread];
#pragma unroll
  for (int c = 0; c < kColsPerThread; ++c) acc[c] = 0.0f;
  __syncthreads();  // q_s is written

  for (int start = lo; start < hi; start += kThreads) {
    const int count = min(kThreads, hi - start);
    float score = -INFINITY;
    if (tid < count) {
      const T* k_row = k_head + (start + tid) * kv_stride;
      float dot = 0.0f;
      for (int d = 0; d < D; ++d) dot += q_s[d] * to_f32(k_row[d]);
      score = dot * scale;
      if (softcap > 0) score = attention_internal::soft_cap(score, softcap, nullptr);
    }
    const float warp_m = warp_max(score);
    if (lane == 0) max_s[warp] = warp_m;
    __syncthreads();  // the warps' maxima are written
    float chunk_max = max_s[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) chunk_max = fmaxf(chunk_max, max_s[w]);
    const float new_max = fmaxf(running_max, chunk_max);  // finite: the chunk has a key
    // exp(-inf) = 0 on the first chunk: nothing accumulated yet.
    const float rescale = expf(running_max - new_max);
    const float p = tid < count ? expf(score - new_max) : 0.0f;
    p_s[tid] = p;
    const float warp_s = warp_sum(p);
    if (lane == 0) sum_s[warp] = warp_s;
    __syncthreads();  // the probabilities and the warps' sums are written
    float chunk_sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) chunk_sum += sum_s[w];
    running_sum = running_sum * rescale + chunk_sum;
    running_max = new_max;
#pragma unroll
    for (int c = 0; c < kColsPerThread; ++c) {
      const int d = tid + c * kThreads;
      if (d >= D) continue;
      float sum = 0.0f;
      for (int j = 0; j < count; ++j) sum += p_s[j] * to_f32(v_head[(start + j) * kv_stride + d]);
      acc[c] = acc[c] * rescale + sum;
    }
    __syncthreads();  // the chunk's shared values are read before the next chunk writes them
  }
  if (splits > 1) {
    float* out = partial + (static_cast<int64_t>(blockIdx.x) * splits + split) * (D + 2);
    if (tid == 0) {
      out[0] = running_max;
      out[1] = running_sum;
    }
#pragma unroll
    for (int c = 0; c < kColsPerThread; ++c) {
      const int d = tid + c * kThreads;
      if (d < D) out[2 + d] = acc[c];
    }
    return;
  }
  float* y_row = y + (static_cast<int64_t>(i) * Hq + h) * D;
  const float inv = 1.0f / running_sum;
#pragma unroll
  for (int c = 0; c < kColsPerThread; ++c) {
    const int d = tid + c * kThreads;
    if (d < D) y_row[d] = acc[c] * inv;
  }
}

// Block (i * Hq + h): y[i, h] from the splits' partials, each rescaled to the overall max (an empty
// split's exp(-inf) is 0), summed in split order.
__global__ void __launch_bounds__(kThreads)
    decode_attention_combine_kernel(float* y, const float* partial, int splits, int D) {
  const float* in = partial + static_cast<int64_t>(blockIdx.x) * splits * (D + 2);
  float overall_max = -INFINITY;
  for (int s = 0; s < splits; ++s) overall_max = fmaxf(overall_max, in[s * (D + 2)]);
  float sum = 0.0f;
  for (int s = 0; s < splits; ++s) {
    sum += in[s * (D + 2) + 1] * expf(in[s * (D + 2)] - overall_max);
  }
  const float inv = 1.0f / sum;
  for (int d = static_cast<int>(threadIdx.x); d < D; d += kThreads) {
    float out = 0.0f;
    for (int s = 0; s < splits; ++s) {
      out += in[s * (D + 2) + 2 + d] * expf(in[s * (D + 2)] - overall_max);
    }
    y[static_cast<int64_t>(blockIdx.x) * D + d] = out * inv;
  }
}

}  // namespace

size_t decode_attention_scratch_bytes(int64_t D) {
  return static_cast<size_t>(kSplitBlocks * (D + 2)) * sizeof(float);
}

namespace {

template <typename T>
void launch_decode_attention(float* y, const float* q, const T* k_cache, const T* v_cache,
                             int64_t n, int64_t P, int64_t Hq, int64_t Hkv, int64_t D,
                             void* scratch, cudaStream_t stream, int64_t window,
                             double score_divisor, double softcap) {
  ZERO_CHECK(n >= 1 && P >= 0 && Hkv > 0 && Hq % Hkv == 0 && D >= 1 && D <= kMaxHeadDim,
             "decode_attention: n ", n, " P ", P, " Hq ", Hq, " Hkv ", Hkv, " D ", D);
  ZERO_CHECK(softcap >= 0, "decode_attention: softcap ", softcap, " < 0");
  ZERO_CHECK(n * Hq <= INT32_MAX && P + n <= INT32_MAX, "decode_attention: ", n * Hq, " blocks or ",
             P + n, " positions past 32 bits");
  const float scale = 1.0f / (std::sqrt(static_cast<float>(D)) * static_cast<float>(score_divisor));
  const int64_t splits = scratch != nullptr ? key_splits(n, P, Hq, window) : 1;
  float* partial = static_cast<float*>(scratch);
  ZERO_LAUNCH(dim3(static_cast<unsigned>(n * Hq), static_cast<unsigned>(splits)), kThreads, 0,
              stream, decode_attention_kernel<T>)
  (y, partial, q, k_cache, v_cache, static_cast<int>(Hq), static_cast<int>(Hkv),
   static_cast<int>(D), static_cast<int>(P), scale, static_cast<int>(window),
   static_cast<float>(softcap));
  CUDA_CHECK_LAUNCH();
  if (splits > 1) {
    // Stream order: the partials are written before the combine reads them.
    ZERO_LAUNCH(static_cast<unsigned>(n * Hq), kThreads, 0, stream, decode_attention_combine_kernel)
    (y, partial, static_cast<int>(splits), static_cast<int>(D));
    CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void decode_attention(float* y, const float* q, const float* k_cache, const float* v_cache,
                      int64_t n, int64_t P, int64_t Hq, int64_t Hkv, int64_t D, void* scratch,
                      cudaStream_t stream, int64_t window, double score_divisor, double softcap) {
  launch_decode_attention(y, q, k_cache, v_cache, n, P, Hq, Hkv, D, scratch, stream, window,
                          score_divisor, softcap);
}

void decode_attention(float* y, const float* q, const __nv_bfloat16* k_cache,
                      const __nv_bfloat16* v_cache, int64_t n, int64_t P, int64_t Hq, int64_t Hkv,
                      int64_t D, void* scratch, cudaStream_t stream, int64_t window,
                      double score_divisor, double softcap) {
  launch_decode_attention(y, q, k_cache, v_cache, n, P, Hq, Hkv, D, scratch, stream, window,
                          score_divisor, softcap);
}

}  // namespace zero::kernels::cuda
