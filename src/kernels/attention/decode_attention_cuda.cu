// decode_attention (decode_attention_cuda.h): one block of kWarps warps per (new row, query head).
// Legend: n new rows, Hq / Hkv heads, G = Hq / Hkv, D head dim, P cached positions before the new
// rows. Keys stream in chunks of kChunk: warp w scores keys w, w + kWarps, ... of the chunk (lanes
// over D, a butterfly sum), then every thread rescales its output columns d = tid, tid + kThreads
// by the new running max and adds the chunk's probabilities times v.
#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/launch.h"
#include "kernels/attention/decode_attention_cuda.h"

namespace zero::kernels::cuda {
namespace {

constexpr int kLanes = 32;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kLanes;
constexpr int kChunk = 64;  // keys scored per pass
constexpr int kMaxHeadDim = 256;
constexpr int kColsPerThread = kMaxHeadDim / kThreads;  // output columns a thread owns
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

// Block (i * Hq + h): query row i, head h. Every thread keeps the same running max and sum (it
// reads the same shared scores), and its own output columns.
__global__ void __launch_bounds__(kThreads)
    decode_attention_kernel(float* y, const float* q, const float* k_cache, const float* v_cache,
                            int Hq, int Hkv, int D, int P, float scale, int window) {
  __shared__ float q_s[kMaxHeadDim];
  __shared__ float p_s[kChunk];  // the chunk's scaled scores, then their exp
  const int i = static_cast<int>(blockIdx.x) / Hq, h = static_cast<int>(blockIdx.x) % Hq;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % kLanes, warp = tid / kLanes;
  const int64_t kv_stride = static_cast<int64_t>(Hkv) * D;  // floats per cached position
  const float* k_head = k_cache + static_cast<int64_t>(h / (Hq / Hkv)) * D;
  const float* v_head = v_cache + static_cast<int64_t>(h / (Hq / Hkv)) * D;
  const float* q_row = q + (static_cast<int64_t>(i) * Hq + h) * D;
  for (int d = tid; d < D; d += kThreads) q_s[d] = q_row[d];

  const int keys = P + i + 1;  // causal: positions [0, P + i]
  const int first = window > 0 && keys > window ? keys - window : 0;
  float running_max = -INFINITY, running_sum = 0.0f;
  float acc[kColsPerThread];
#pragma unroll
  for (int c = 0; c < kColsPerThread; ++c) acc[c] = 0.0f;
  __syncthreads();  // q_s is written

  for (int start = first; start < keys; start += kChunk) {
    const int count = min(kChunk, keys - start);
    for (int j = warp; j < kChunk; j += kWarps) {
      float dot = 0.0f;
      if (j < count) {
        const float* k_row = k_head + (start + j) * kv_stride;
        for (int d = lane; d < D; d += kLanes) dot += q_s[d] * k_row[d];
      }
      dot = warp_sum(dot);
      if (lane == 0) p_s[j] = j < count ? dot * scale : -INFINITY;
    }
    __syncthreads();  // the chunk's scores are written
    float chunk_max = -INFINITY;
    for (int j = 0; j < count; ++j) chunk_max = fmaxf(chunk_max, p_s[j]);
    const float new_max = fmaxf(running_max, chunk_max);
    // exp(-inf) = 0 on the first chunk: nothing accumulated yet.
    const float rescale = expf(running_max - new_max);
    __syncthreads();  // every thread has read the scores before they become probabilities
    if (tid < kChunk) p_s[tid] = tid < count ? expf(p_s[tid] - new_max) : 0.0f;
    __syncthreads();  // the probabilities are written
    float chunk_sum = 0.0f;
    for (int j = 0; j < count; ++j) chunk_sum += p_s[j];
    running_sum = running_sum * rescale + chunk_sum;
    running_max = new_max;
#pragma unroll
    for (int c = 0; c < kColsPerThread; ++c) {
      const int d = tid + c * kThreads;
      if (d >= D) continue;
      float sum = 0.0f;
      for (int j = 0; j < count; ++j) sum += p_s[j] * v_head[(start + j) * kv_stride + d];
      acc[c] = acc[c] * rescale + sum;
    }
    __syncthreads();  // the probabilities are read before the next chunk's scores overwrite them
  }
  float* y_row = y + (static_cast<int64_t>(i) * Hq + h) * D;
  const float inv = 1.0f / running_sum;
#pragma unroll
  for (int c = 0; c < kColsPerThread; ++c) {
    const int d = tid + c * kThreads;
    if (d < D) y_row[d] = acc[c] * inv;
  }
}

}  // namespace

void decode_attention(float* y, const float* q, const float* k_cache, const float* v_cache,
                      int64_t n, int64_t P, int64_t Hq, int64_t Hkv, int64_t D, cudaStream_t stream,
                      int64_t window, double score_divisor) {
  ZERO_CHECK(n >= 1 && P >= 0 && Hkv > 0 && Hq % Hkv == 0 && D >= 1 && D <= kMaxHeadDim,
             "decode_attention: n ", n, " P ", P, " Hq ", Hq, " Hkv ", Hkv, " D ", D);
  ZERO_CHECK(n * Hq <= INT32_MAX && P + n <= INT32_MAX, "decode_attention: ", n * Hq, " blocks or ",
             P + n, " positions past 32 bits");
  const float scale = 1.0f / (std::sqrt(static_cast<float>(D)) * static_cast<float>(score_divisor));
  ZERO_LAUNCH(static_cast<unsigned>(n * Hq), kThreads, 0, stream, decode_attention_kernel)
  (y, q, k_cache, v_cache, static_cast<int>(Hq), static_cast<int>(Hkv), static_cast<int>(D),
   static_cast<int>(P), scale, static_cast<int>(window));
  CUDA_CHECK_LAUNCH();
}

}  // namespace zero::kernels::cuda
