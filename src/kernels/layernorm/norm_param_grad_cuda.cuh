// Device pieces shared by the LayerNorm and RMSNorm CUDA kernels: a warp sum, and the deterministic
// weight / bias gradients (column sums over rows, in two fixed-order passes, no atomics).
// Legend: N rows, C channels, G row chunks. Included only by .cu files.
//
// Everything here has internal linkage: without relocatable device code each .cu file carries its
// own copy of a kernel, so two libraries instantiating the same template must not share a symbol.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/cuda_check.h"
#include "core/cuda/launch.h"
#include "kernels/cuda_vector.cuh"

namespace zero::kernels::cuda {
namespace {

constexpr unsigned kFullWarpMask = 0xffffffffu;

// Rows per block of the one-warp-per-row kernels (forward, and backward's input gradient).
constexpr int kNormRowWarps = 8;

// Sum over the 32 lanes; every lane gets the same value (a butterfly: lanes i and i^k add the same
// two numbers, and fp32 addition is commutative).
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullWarpMask, v, offset);
  return v;
}

// Rows are split into G contiguous chunks; each chunk's per-channel sum lands in a (G, C) fp32
// partial, then the G partials are added in chunk order. G depends on N only, so the summation
// order (hence every bit of the result) is a function of the inputs alone.
constexpr int64_t kMinRowsPerChunk = 32;
constexpr int64_t kMaxRowChunks = 128;
constexpr int kChunkTileChannels = 32;  // blockDim.x of the partials kernel: one warp of channels
constexpr int kChunkTileRows = 8;       // blockDim.y: rows read concurrently per chunk
constexpr int kChunkTileThreads = kChunkTileChannels * kChunkTileRows;

inline int64_t norm_grad_row_chunks(int64_t N) {
  return std::clamp<int64_t>((N + kMinRowsPerChunk - 1) / kMinRowsPerChunk, 1, kMaxRowChunks);
}

// partial_dweight(G, C)[g, c] = Σ_{n in chunk g} (dout[n, c] * (inp[n, c] - mean[n])) * rstd[n]
// (mean == nullptr: RMSNorm, 0); partial_dbias(G, C)[g, c] = Σ dout[n, c] when partial_dbias is
// not null. Block (32, 8) = channels [32 bx, 32 bx + 32) of chunk g = by; thread (tx, ty) sums the
// rows ty, ty + 8, ... of the chunk in order, then ty = 0 adds the 8 row-lane sums in order.
template <typename T>
__global__ void __launch_bounds__(kChunkTileThreads)
    norm_grad_partials_kernel(float* partial_dweight, float* partial_dbias, const T* dout,
                              const T* inp, const float* mean, const float* rstd, int64_t N,
                              int64_t C, int64_t rows_per_chunk) {
  __shared__ float dweight_s[kChunkTileRows][kChunkTileChannels];
  __shared__ float dbias_s[kChunkTileRows][kChunkTileChannels];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kChunkTileChannels + tx;
  const int64_t g = blockIdx.y;
  const int64_t row_begin = g * rows_per_chunk;
  const int64_t row_end =
      N < row_begin + rows_per_chunk ? N : row_begin + rows_per_chunk;  // may be empty
  float dweight_acc = 0.0f, dbias_acc = 0.0f;
  if (c < C) {
    for (int64_t n = row_begin + ty; n < row_end; n += kChunkTileRows) {
      const float dy = to_f32(dout[n * C + c]);
      const float x = to_f32(inp[n * C + c]);
      const float m = mean != nullptr ? mean[n] : 0.0f;
      dweight_acc += (dy * (x - m)) * rstd[n];
      dbias_acc += dy;
    }
  }
  dweight_s[ty][tx] = dweight_acc;
  dbias_s[ty][tx] = dbias_acc;
  // Why: row lane 0 reads the sums the other 7 row lanes just wrote.
  __syncthreads();
  if (ty == 0 && c < C) {
    float dweight_sum = 0.0f, dbias_sum = 0.0f;
#pragma unroll
    for (int r = 0; r < kChunkTileRows; ++r) {
      dweight_sum += dweight_s[r][tx];
      dbias_sum += dbias_s[r][tx];
    }
    partial_dweight[g * C + c] = dweight_sum;
    if (partial_dbias != nullptr) partial_dbias[g * C + c] = dbias_sum;
  }
}

// dst[c] += Σ_g partials[g, c], g in order; blockIdx.y picks (dweight, its partials) or (dbias,
// its partials).
__global__ void add_chunk_partials_kernel(float* dweight, const float* partial_dweight,
                                          float* dbias, const float* partial_dbias, int64_t G,
                                          int64_t C) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float* dst = blockIdx.y == 0 ? dweight : dbias;
  const float* partials = blockIdx.y == 0 ? partial_dweight : partial_dbias;
  float sum = 0.0f;
  for (int64_t g = 0; g < G; ++g) sum += partials[g * C + c];
  dst[c] += sum;
}

// Bytes of fp32 partials for dweight (and dbias when with_bias) of an (N, C) norm.
inline size_t norm_grad_partials_bytes(int64_t N, int64_t C, bool with_bias) {
  return static_cast<size_t>(norm_grad_row_chunks(N)) * static_cast<size_t>(C) * sizeof(float) *
         (with_bias ? 2 : 1);
}

// dweight(C) += Σ_n (dout * (inp - mean)) * rstd, dbias(C) += Σ_n dout (dbias may be null; mean
// null for RMSNorm), through `partials` (norm_grad_partials_bytes(N, C, dbias != nullptr) bytes,
// 4-byte aligned). Two launches on `stream`; no synchronisation.
template <typename T>
void launch_norm_param_grads(float* dweight, float* dbias, const T* dout, const T* inp,
                             const float* mean, const float* rstd, int64_t N, int64_t C,
                             float* partials, cudaStream_t stream) {
  const int64_t G = norm_grad_row_chunks(N);
  const int64_t rows_per_chunk = (N + G - 1) / G;
  float* partial_dweight = partials;                                     // (G, C)
  float* partial_dbias = dbias != nullptr ? partials + G * C : nullptr;  // (G, C)
  const dim3 tile(kChunkTileChannels, kChunkTileRows);
  const dim3 grid(static_cast<unsigned>((C + kChunkTileChannels - 1) / kChunkTileChannels),
                  static_cast<unsigned>(G));
  ZERO_LAUNCH(grid, tile, 0, stream, norm_grad_partials_kernel<T>)
  (partial_dweight, partial_dbias, dout, inp, mean, rstd, N, C, rows_per_chunk);
  CUDA_CHECK_LAUNCH();
  constexpr int kThreads = 256;
  const dim3 add_grid(static_cast<unsigned>((C + kThreads - 1) / kThreads),
                      dbias != nullptr ? 2 : 1);
  ZERO_LAUNCH(add_grid, kThreads, 0, stream, add_chunk_partials_kernel)
  (dweight, partial_dweight, dbias, partial_dbias, G, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace zero::kernels::cuda
