// Internal to the attention kernels (attention_cuda.cu: the fp32 CUDA-core kernels and the entry
// points; attention_mma_cuda.cu: the tensor-core kernels for 16-bit inputs): tile geometry, warp
// reductions, shared-memory loads and the launch helper both use, and the tensor-core launchers.
// Legend as in attention_cuda.cu.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/launch.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/cuda_vector.cuh"
#include "kernels/mma.cuh"

namespace zero::kernels::cuda {
namespace attention_internal {

constexpr int kLanes = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kMaxHeadDim = 256;

// Tile geometry for the head-dim bucket kD (32, 64, 128 or 256).
template <int kD>
struct Tile {
  static_assert(kD % kLanes == 0 && kD <= kMaxHeadDim);
  static constexpr int kColsPerLane = kD / kLanes;  // lane owns head-dim columns lane + 32 i
  // Four warps at kD = 256 keep every kernel under 99 KiB of shared memory (the sm_86/89 limit).
  static constexpr int kWarps = kD <= 128 ? 8 : 4;
  static constexpr int kThreads = kWarps * kLanes;
  static constexpr int kRowsPerWarp = 4;  // owned rows per warp
  static constexpr int kRows = kWarps * kRowsPerWarp;
  static constexpr int kCols = kLanes;  // streamed rows per tile, one per lane
  // Shared row stride in floats. Odd, so when lane j reads row j at the same column the 32
  // addresses fall in 32 different banks.
  static constexpr int kStride = kD + 1;
  static constexpr int kOwnedFloats = kRows * kStride;
  static constexpr int kStreamedFloats = kCols * kStride;
};

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    x = fmaxf(x, __shfl_xor_sync(kFullMask, x, offset));
  }
  return x;
}

// Butterfly sum: IEEE addition is commutative, so every lane ends with the same bits.
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

// Gemma 2's soft-capping of a scaled score x: cap * tanh(x / cap), and tanh's slope
// 1 - tanh^2(x / cap) for the backward (d capped / dx). Called only when cap > 0: the kernels test
// the (uniform) cap once per score, so cap = 0 runs no tanh and multiplies by no slope.
__device__ __forceinline__ float soft_cap(float x, float cap, float* slope) {
  const float th = tanhf(x / cap);
  if (slope != nullptr) *slope = 1.0f - th * th;
  return cap * th;
}

// Copies rows [row0, row0 + kNumRows) of head `head` of x (B, T, H, D), batch b, into x_s
// (kNumRows, kD + 1) as fp32, zero-filling columns D..kD-1 and rows at or past T (so padded
// entries contribute exact zeros to every dot product). Called by all kThreads threads.
template <int kD, int kNumRows, int kThreads, typename T>
__device__ __forceinline__ void load_rows(float* x_s, const T* x, int b, int row0, int T_, int H,
                                          int head, int D) {
  constexpr int kStride = kD + 1;
  for (int e = threadIdx.x; e < kNumRows * kD; e += kThreads) {
    const int r = e / kD;
    const int d = e % kD;
    const int t = row0 + r;
    float val = 0.0f;
    if (t < T_ && d < D) {
      val = to_f32(x[((static_cast<int64_t>(b) * T_ + t) * H + head) * D + d]);
    }
    x_s[r * kStride + d] = val;
  }
}

// Tensor-core forward for 16-bit T and D = kD in {64, 128}: flash attention 2's forward on
// mma.sync (kernels/mma.cuh). Block = kMmaRows query rows of one (b, h), 16 per warp; key and value
// tiles of kMmaCols rows pass through shared memory (values transposed, so both products read
// their B fragments as one 32-bit load). Scores, the online softmax (base 2: the scale carries
// log2 e) and the output accumulators stay in registers in the fragment layouts; P is rounded to T
// for the P·V product, as FlashAttention does. lse is natural-log, as the fp32 kernel's.
constexpr int kMmaWarps = 4;
constexpr int kMmaRows = 16 * kMmaWarps;
constexpr int kMmaCols = 64;

template <int kD>
struct MmaTile {
  // Row strides in elements, 16 bytes past a multiple of 128: the eight rows g = 0..7 of a
  // fragment load then start in eight different 4-bank groups (conflict-free).
  static constexpr int kKStride = kD + 8;        // k_s (kMmaCols, kD + 8)
  static constexpr int kVStride = kMmaCols + 8;  // vt_s (kD, kMmaCols + 8)
  static constexpr int kSmemElems = kMmaCols * kKStride + kD * kVStride;
};

template <typename T>
__device__ __forceinline__ uint32_t load_pair(const T* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// Copies `rows` rows of head `head` of x (B, T, H, kD) from row0 into shared memory: row-major
// into x_s (rows, kD + 8) when non-null, transposed into xt_s (kD, rows + 8) when non-null; rows
// at or past T are zero. Called by all threads of the block.
template <typename T, int kD, int kRowsTile, int kThreads>
__device__ __forceinline__ void load_tile_mma(T* x_s, uint16_t* xt_s, const T* x, int b, int row0,
                                              int T_, int H, int head) {
  for (int e = threadIdx.x; e < kRowsTile * kD / 2; e += kThreads) {
    const int j = e / (kD / 2);
    const int d = 2 * (e % (kD / 2));
    const int r = row0 + j;
    const uint32_t pair =
        r < T_ ? load_pair(x + ((static_cast<int64_t>(b) * T_ + r) * H + head) * kD + d) : 0u;
    if (x_s != nullptr) *reinterpret_cast<uint32_t*>(x_s + j * (kD + 8) + d) = pair;
    if (xt_s != nullptr) {
      xt_s[d * (kRowsTile + 8) + j] = static_cast<uint16_t>(pair & 0xffffu);
      xt_s[(d + 1) * (kRowsTile + 8) + j] = static_cast<uint16_t>(pair >> 16);
    }
  }
}

// The A fragments of rows r[0], r[1] (this thread's two rows of the warp's 16) of x, all k-steps.
template <typename T, int kD>
__device__ __forceinline__ void load_a_fragments(uint32_t (&a)[kD / 16][4], const T* x, int b,
                                                 const int (&r)[2], int T_, int H, int head) {
  const int t4 = threadIdx.x % kLanes % 4;
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = r[i % 2];
      const int col = 16 * ks + 2 * t4 + 8 * (i / 2);
      a[ks][i] = row < T_
                     ? load_pair(x + ((static_cast<int64_t>(b) * T_ + row) * H + head) * kD + col)
                     : 0u;
    }
  }
}

// acc[nt] (+)= A · B for the 8-column tiles nt of a 16 x (8 kNT) product over kD: A in registers,
// B[k][n] = y_s[n][k] (y_s row-major, stride kD + 8, rows 8 nt + g).
template <typename T, int kD, int kNT>
__device__ __forceinline__ void mma_rows_by_tile(float (&acc)[kNT][4],
                                                 const uint32_t (&a)[kD / 16][4], const T* y_s) {
  const int lane = threadIdx.x % kLanes;
  const int g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
    const T* yrow = y_s + (8 * nt + g) * (kD + 8) + 2 * t4;
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      const uint32_t bf[2] = {load_pair(yrow + 16 * ks), load_pair(yrow + 16 * ks + 8)};
      mma_16816<T>(acc[nt], a[ks], bf);
    }
  }
}

// out[dt] += P · Y over a tile of kCols streamed rows: P (16 x kCols) as fp32 scores in the D
// layout (rounded to T here), Y (kCols x kD) from its transpose yt_s (kD, kCols + 8).
template <typename T, int kD, int kCols>
__device__ __forceinline__ void mma_scores_by_rows(float (&out)[kD / 8][4],
                                                   const float (&p)[kCols / 8][4],
                                                   const uint16_t* yt_s) {
  const int lane = threadIdx.x % kLanes;
  const int g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int kk = 0; kk < kCols / 16; ++kk) {
    const uint32_t pa[4] = {
        pack2<T>(p[2 * kk][0], p[2 * kk][1]), pack2<T>(p[2 * kk][2], p[2 * kk][3]),
        pack2<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]), pack2<T>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int dt = 0; dt < kD / 8; ++dt) {
      const uint16_t* yrow = yt_s + (8 * dt + g) * (kCols + 8) + 16 * kk + 2 * t4;
      const uint32_t bf[2] = {*reinterpret_cast<const uint32_t*>(yrow),
                              *reinterpret_cast<const uint32_t*>(yrow + 8)};
      mma_16816<T>(out[dt], pa, bf);
    }
  }
}

// A block over query tiles: its (b, h, kv head, first row), latest tiles first (they see the most
// keys, so the longest blocks start earliest), and this thread's two rows of its warp's 16.
struct MmaQueryBlock {
  int b, h, hkv, q0;
  int row[2];
};

__device__ __forceinline__ MmaQueryBlock mma_query_block(int B, int T_, int Hq, int Hkv) {
  const int BH = B * Hq;
  const int num_q_tiles = (T_ + kMmaRows - 1) / kMmaRows;
  const int q_tile = num_q_tiles - 1 - static_cast<int>(blockIdx.x / BH);
  const int bh = static_cast<int>(blockIdx.x % BH);
  MmaQueryBlock qb;
  qb.b = bh / Hq;
  qb.h = bh % Hq;
  qb.hkv = qb.h / (Hq / Hkv);
  qb.q0 = q_tile * kMmaRows;
  const int warp = static_cast<int>(threadIdx.x) / kLanes;
  const int g = static_cast<int>(threadIdx.x) % kLanes / 4;
  qb.row[0] = qb.q0 + warp * 16 + g;
  qb.row[1] = qb.row[0] + 8;
  return qb;
}

// Launches with `smem_bytes` of dynamic shared memory, opting in past the 48 KiB default first.
// The attribute is per kernel and cheap to set; it does not synchronise.
template <typename Kernel, typename... Args>
void launch_with_smem(Kernel kernel, int64_t blocks, int threads, size_t smem_bytes,
                      cudaStream_t stream, Args... args) {
  CUDA_ABORT_IF_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem_bytes)));
  ZERO_LAUNCH(static_cast<unsigned>(blocks), threads, smem_bytes, stream, kernel)(args...);
  CUDA_CHECK_LAUNCH();
}

// The tensor-core paths (attention_mma_cuda.cu), for T = __nv_bfloat16 or __half: each launches
// and returns true when its shape and alignment qualify, else returns false having done nothing
// (the caller then runs the CUDA-core kernels). `scale` = 1 / (sqrt(D) * score_divisor);
// `softcap` as attention_forward's (0: off).
template <typename T>
bool attention_forward_mma(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B,
                           int64_t T_, int64_t Hq, int64_t Hkv, int64_t D, cudaStream_t stream,
                           float scale, int window, float softcap);
template <typename T>
bool attention_backward_mma(T* dq, T* dk, T* dv, const T* dout, const float* lse, const T* q,
                            const T* k, const T* v, int64_t B, int64_t T_, int64_t Hq, int64_t Hkv,
                            int64_t D, float* delta, cudaStream_t stream, float scale, int window,
                            float softcap);

}  // namespace attention_internal
}  // namespace zero::kernels::cuda
