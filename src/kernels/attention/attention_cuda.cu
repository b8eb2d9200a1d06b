// CUDA causal GQA attention: tiled fp32 kernels over shared memory, one warp per few rows and one
// lane per streamed row. Legend: B batch, T time, Hq / Hkv heads, G = Hq / Hkv, D head_dim, kD the
// head-dim bucket (D <= kD, zero-padded). q/out/dout/dq (B, T, Hq, D); k/v/dk/dv (B, T, Hkv, D);
// lse/delta (B, Hq, T).
//
// Every kernel has the same shape: a block owns kRows rows (query rows in the forward and dq
// kernels, keys in the dk/dv kernel), kRowsPerWarp per warp, and streams tiles of kCols = 32 rows
// of the other side through shared memory, lane j taking streamed row j. A warp's scores for a
// tile are then one register per owned row, and the products back to D columns are a loop over the
// 32 lanes' values broadcast by __shfl_sync, each lane accumulating columns d = lane + 32 i.

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
namespace {

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

// Forward. Block = (query tile, b, h); it streams the key tiles at or before its last query row.
// Each warp keeps, for each of its rows, the running max m, the running Σ exp(score - m) l and the
// unnormalised output acc (fp32, columns lane + 32 i).
template <typename T, int kD>
__global__ void __launch_bounds__(Tile<kD>::kThreads)
    attention_forward_kernel(T* out, float* lse, const T* q, const T* k, const T* v, int B, int T_,
                             int Hq, int Hkv, int D, float scale, int window) {
  using Tl = Tile<kD>;
  constexpr int kR = Tl::kRowsPerWarp;
  constexpr int kS = Tl::kStride;
  constexpr int kC = Tl::kColsPerLane;
  ZERO_EXTERN_SHARED(float, smem);
  float* q_s = smem;                       // (kRows, kStride) this block's query rows
  float* k_s = q_s + Tl::kOwnedFloats;     // (kCols, kStride) one key tile
  float* v_s = k_s + Tl::kStreamedFloats;  // (kCols, kStride) its values

  const int BH = B * Hq;
  const int num_q_tiles = (T_ + Tl::kRows - 1) / Tl::kRows;
  // Latest query tiles first: they see the most keys, so the longest blocks start earliest.
  const int q_tile = num_q_tiles - 1 - static_cast<int>(blockIdx.x / BH);
  const int bh = static_cast<int>(blockIdx.x % BH);
  const int b = bh / Hq;
  const int h = bh % Hq;
  const int hkv = h / (Hq / Hkv);
  const int q0 = q_tile * Tl::kRows;
  const int warp = threadIdx.x / kLanes;
  const int lane = threadIdx.x % kLanes;
  const int row0 = warp * kR;  // this warp's first row within the tile

  load_rows<kD, Tl::kRows, Tl::kThreads>(q_s, q, b, q0, T_, Hq, h, D);

  float m[kR], l[kR], acc[kR][kC];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < kC; ++i) acc[r][i] = 0.0f;
  }

  const int q_end = min(T_, q0 + Tl::kRows);  // keys >= q_end are masked for every row here
  for (int kv0 = 0; kv0 < q_end; kv0 += Tl::kCols) {
    // Why: every warp has finished reading the previous key/value tile before it is overwritten.
    __syncthreads();
    load_rows<kD, Tl::kCols, Tl::kThreads>(k_s, k, b, kv0, T_, Hkv, hkv, D);
    load_rows<kD, Tl::kCols, Tl::kThreads>(v_s, v, b, kv0, T_, Hkv, hkv, D);
    // Why: the tiles (and q_s, on the first pass) are complete before any warp reads them.
    __syncthreads();

    // Lane j scores key kv0 + j against each of the warp's rows.
    float s[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) s[r] = 0.0f;
#pragma unroll 8
    for (int d = 0; d < kD; ++d) {
      const float kd = k_s[lane * kS + d];
#pragma unroll
      for (int r = 0; r < kR; ++r) s[r] += q_s[(row0 + r) * kS + d] * kd;
    }

    const int kv = kv0 + lane;
    float p[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int t = q0 + row0 + r;
      const bool visible = kv <= t && t < T_ && (window <= 0 || t - kv < window);
      const float score = visible ? s[r] * scale : -INFINITY;
      const float m_new = fmaxf(m[r], warp_max(score));
      // A row that has seen no visible key keeps m = -inf; exponentiating against 0 then gives
      // p = 0 and a zero correction instead of -inf - -inf = NaN.
      const float m_base = m_new == -INFINITY ? 0.0f : m_new;
      p[r] = visible ? expf(score - m_base) : 0.0f;
      const float correction = expf(m[r] - m_base);  // rescales the old sums to the new max
      l[r] = l[r] * correction + warp_sum(p[r]);
      m[r] = m_new;
#pragma unroll
      for (int i = 0; i < kC; ++i) acc[r][i] *= correction;
    }

    // acc[r][:] += Σ_j p[r, j] v[j, :].
#pragma unroll 4
    for (int j = 0; j < Tl::kCols; ++j) {
      float vj[kC];
#pragma unroll
      for (int i = 0; i < kC; ++i) vj[i] = v_s[j * kS + lane + kLanes * i];
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const float pj = __shfl_sync(kFullMask, p[r], j);
#pragma unroll
        for (int i = 0; i < kC; ++i) acc[r][i] += pj * vj[i];
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int t = q0 + row0 + r;
    if (t >= T_) continue;  // padding row of the last tile
    // l >= 1 here: key t (the diagonal) is visible to every row, even with a window, and its max
    // term contributes exp(0).
    const float inv_l = 1.0f / l[r];
    const int64_t off = ((static_cast<int64_t>(b) * T_ + t) * Hq + h) * D;
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      const int d = lane + kLanes * i;
      if (d < D) out[off + d] = from_f32<T>(acc[r][i] * inv_l);
    }
    if (lane == 0) lse[(static_cast<int64_t>(b) * Hq + h) * T_ + t] = m[r] + logf(l[r]);
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

template <typename T, int kD>
__global__ void __launch_bounds__(kMmaWarps* kLanes)
    attention_forward_mma_kernel(T* out, float* lse, const T* q, const T* k, const T* v, int B,
                                 int T_, int Hq, int Hkv, float scale_log2, int window) {
  constexpr int kNT = kMmaCols / 8;  // 8-key column tiles of a score tile
  constexpr int kDT = kD / 8;        // 8-wide column tiles of the output
  constexpr int kThreads = kMmaWarps * kLanes;
  ZERO_EXTERN_SHARED(float, smem);
  T* k_s = reinterpret_cast<T*>(smem);  // (kMmaCols, kD + 8) one key tile
  uint16_t* vt_s = reinterpret_cast<uint16_t*>(k_s + kMmaCols * MmaTile<kD>::kKStride);  // values^T
  const MmaQueryBlock qb = mma_query_block(B, T_, Hq, Hkv);
  const int t4 = static_cast<int>(threadIdx.x) % kLanes % 4;

  uint32_t qa[kD / 16][4];
  load_a_fragments<T, kD>(qa, q, qb.b, qb.row, T_, Hq, qb.h);
  float o[kDT][4];
#pragma unroll
  for (int dt = 0; dt < kDT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  const int q_end = min(T_, qb.q0 + kMmaRows);  // keys >= q_end are masked for every row here
  const int kv_begin = window > 0 ? max(0, qb.q0 - window + 1) / kMmaCols * kMmaCols : 0;
  for (int kv0 = kv_begin; kv0 < q_end; kv0 += kMmaCols) {
    // Why: every warp has finished reading the previous tiles before they are overwritten.
    __syncthreads();
    load_tile_mma<T, kD, kMmaCols, kThreads>(k_s, nullptr, k, qb.b, kv0, T_, Hkv, qb.hkv);
    load_tile_mma<T, kD, kMmaCols, kThreads>(nullptr, vt_s, v, qb.b, kv0, T_, Hkv, qb.hkv);
    // Why: the tiles are complete before any warp reads them.
    __syncthreads();

    float s[kNT][4];
    mma_rows_by_tile<T, kD, kNT>(s, qa, k_s);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = qb.row[i / 2];
        const int key = kv0 + 8 * nt + 2 * t4 + (i % 2);
        const bool visible = key <= r && r < T_ && (window <= 0 || r - key < window);
        s[nt][i] = visible ? s[nt][i] * scale_log2 : -INFINITY;
        mx[i / 2] = fmaxf(mx[i / 2], s[nt][i]);
      }
    }
    float base[2], rowsum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      // A row's values sit in the four lanes 4g..4g+3.
      mx[rr] = fmaxf(mx[rr], __shfl_xor_sync(kFullMask, mx[rr], 1));
      mx[rr] = fmaxf(mx[rr], __shfl_xor_sync(kFullMask, mx[rr], 2));
      const float m_new = fmaxf(m[rr], mx[rr]);
      // A row with no visible key so far keeps m = -inf: exponentiate against 0 (p = 0, no NaN).
      base[rr] = m_new == -INFINITY ? 0.0f : m_new;
      const float correction = exp2f(m[rr] - base[rr]);
      l[rr] *= correction;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        o[dt][2 * rr] *= correction;
        o[dt][2 * rr + 1] *= correction;
      }
      m[rr] = m_new;
    }
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[nt][i] = exp2f(s[nt][i] - base[i / 2]);  // exp2(-inf) = 0 for masked keys
        rowsum[i / 2] += s[nt][i];
      }
    }
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      rowsum[rr] += __shfl_xor_sync(kFullMask, rowsum[rr], 1);
      rowsum[rr] += __shfl_xor_sync(kFullMask, rowsum[rr], 2);
      l[rr] += rowsum[rr];
    }
    mma_scores_by_rows<T, kD, kMmaCols>(o, s, vt_s);  // O += P·V
  }

#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int r = qb.row[rr];
    if (r >= T_) continue;  // padding row of the last tile
    // l >= 1: the row's largest visible score contributes exp2(0).
    const float inv_l = 1.0f / l[rr];
    T* orow = out + ((static_cast<int64_t>(qb.b) * T_ + r) * Hq + qb.h) * kD + 2 * t4;
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
      orow[8 * dt] = from_f32<T>(o[dt][2 * rr] * inv_l);
      orow[8 * dt + 1] = from_f32<T>(o[dt][2 * rr + 1] * inv_l);
    }
    if (t4 == 0) {
      lse[(static_cast<int64_t>(qb.b) * Hq + qb.h) * T_ + r] =
          (m[rr] + log2f(l[rr])) * 0.69314718056f;
    }
  }
}

// Tensor-core backward for 16-bit T at D = kD = 64 (the forward's tiles and fragment layouts), two
// kernels as the fp32 path: dq (with delta) over query tiles, then dk/dv over key tiles. With
// p = exp(score - lse), dp = dout·v, delta = Σ_key p dp and ds = p (dp - delta) scale:
//   dq = Σ_key ds k,   dv = Σ_t p dout,   dk = Σ_t ds q.
// delta comes from the same fp32 p and dp (a first pass over the key tiles), not from the output
// rounded to T (see the fp32 dq kernel); p and ds are rounded to T only as mma operands, after the
// subtraction, so nothing cancels after rounding.

template <int kD>
struct MmaBackwardTile {
  static constexpr int kRowStride = kD + 8;
  static constexpr int kColStride = kMmaCols + 8;
  // dq: k_s, v_s row-major and kt_s transposed.
  static constexpr int kDqElems = 2 * kMmaCols * kRowStride + kD * kColStride;
  // dk/dv: q_s, do_s row-major, qt_s, dot_s transposed (+ lse and delta as floats).
  static constexpr int kDkdvElems = 2 * kMmaCols * kRowStride + 2 * kD * kColStride;
};

template <typename T, int kD>
__global__ void __launch_bounds__(kMmaWarps* kLanes)
    attention_backward_dq_mma_kernel(T* dq, float* delta, const T* dout, const float* lse,
                                     const T* q, const T* k, const T* v, int B, int T_, int Hq,
                                     int Hkv, float scale, float scale_log2, int window) {
  constexpr int kNT = kMmaCols / 8;
  constexpr int kDT = kD / 8;
  constexpr int kThreads = kMmaWarps * kLanes;
  ZERO_EXTERN_SHARED(float, smem);
  T* k_s = reinterpret_cast<T*>(smem);
  T* v_s = k_s + kMmaCols * (kD + 8);
  uint16_t* kt_s = reinterpret_cast<uint16_t*>(v_s + kMmaCols * (kD + 8));

  const MmaQueryBlock qb = mma_query_block(B, T_, Hq, Hkv);
  const int b = qb.b, h = qb.h, hkv = qb.hkv, q0 = qb.q0;
  const int t4 = static_cast<int>(threadIdx.x) % kLanes % 4;
  const int(&row)[2] = qb.row;

  uint32_t qa[kD / 16][4], da[kD / 16][4];
  load_a_fragments<T, kD>(qa, q, b, row, T_, Hq, h);
  load_a_fragments<T, kD>(da, dout, b, row, T_, Hq, h);
  float lse2[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    lse2[rr] = row[rr] < T_
                   ? lse[(static_cast<int64_t>(b) * Hq + h) * T_ + row[rr]] * 1.4426950408889634f
                   : 0.0f;
  }

  const int q_end = min(T_, q0 + kMmaRows);
  const int kv_begin = window > 0 ? max(0, q0 - window + 1) / kMmaCols * kMmaCols : 0;
  // p and dp of one key tile, masked: p = 0 where a key is not visible.
  float s[kNT][4], dp[kNT][4];
  const auto scores = [&](int kv0) {
    mma_rows_by_tile<T, kD, kNT>(s, qa, k_s);
    mma_rows_by_tile<T, kD, kNT>(dp, da, v_s);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = row[i / 2];
        const int key = kv0 + 8 * nt + 2 * t4 + (i % 2);
        const bool visible = key <= r && r < T_ && (window <= 0 || r - key < window);
        s[nt][i] = visible ? exp2f(s[nt][i] * scale_log2 - lse2[i / 2]) : 0.0f;
      }
    }
  };

  // Pass 1: delta.
  float dsum[2] = {0.0f, 0.0f};
  for (int kv0 = kv_begin; kv0 < q_end; kv0 += kMmaCols) {
    // Why: every warp has finished reading the previous tiles before they are overwritten.
    __syncthreads();
    load_tile_mma<T, kD, kMmaCols, kThreads>(k_s, nullptr, k, b, kv0, T_, Hkv, hkv);
    load_tile_mma<T, kD, kMmaCols, kThreads>(v_s, nullptr, v, b, kv0, T_, Hkv, hkv);
    // Why: the tiles are complete before any warp reads them.
    __syncthreads();
    scores(kv0);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) dsum[i / 2] += s[nt][i] * dp[nt][i];
    }
  }
  float dl[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    dsum[rr] += __shfl_xor_sync(kFullMask, dsum[rr], 1);
    dsum[rr] += __shfl_xor_sync(kFullMask, dsum[rr], 2);
    dl[rr] = dsum[rr];
    if (t4 == 0 && row[rr] < T_) delta[(static_cast<int64_t>(b) * Hq + h) * T_ + row[rr]] = dl[rr];
  }

  // Pass 2: dq += ds · k.
  float acc[kDT][4];
#pragma unroll
  for (int dt = 0; dt < kDT; ++dt) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;
  for (int kv0 = kv_begin; kv0 < q_end; kv0 += kMmaCols) {
    __syncthreads();  // as in pass 1
    load_tile_mma<T, kD, kMmaCols, kThreads>(k_s, kt_s, k, b, kv0, T_, Hkv, hkv);
    load_tile_mma<T, kD, kMmaCols, kThreads>(v_s, nullptr, v, b, kv0, T_, Hkv, hkv);
    __syncthreads();
    scores(kv0);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s[nt][i] = s[nt][i] * (dp[nt][i] - dl[i / 2]) * scale;
    }
    mma_scores_by_rows<T, kD, kMmaCols>(acc, s, kt_s);
  }

#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    if (row[rr] >= T_) continue;
    T* drow = dq + ((static_cast<int64_t>(b) * T_ + row[rr]) * Hq + h) * kD + 2 * t4;
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
      drow[8 * dt] = from_f32<T>(to_f32(drow[8 * dt]) + acc[dt][2 * rr]);
      drow[8 * dt + 1] = from_f32<T>(to_f32(drow[8 * dt + 1]) + acc[dt][2 * rr + 1]);
    }
  }
}

template <typename T, int kD>
__global__ void __launch_bounds__(kMmaWarps* kLanes)
    attention_backward_dkdv_mma_kernel(T* dk, T* dv, const T* dout, const float* lse,
                                       const float* delta, const T* q, const T* k, const T* v,
                                       int B, int T_, int Hq, int Hkv, float scale,
                                       float scale_log2, int window) {
  constexpr int kNT = kMmaCols / 8;
  constexpr int kDT = kD / 8;
  constexpr int kThreads = kMmaWarps * kLanes;
  ZERO_EXTERN_SHARED(float, smem);
  T* q_s = reinterpret_cast<T*>(smem);
  T* do_s = q_s + kMmaCols * (kD + 8);
  uint16_t* qt_s = reinterpret_cast<uint16_t*>(do_s + kMmaCols * (kD + 8));
  uint16_t* dot_s = qt_s + kD * (kMmaCols + 8);
  float* lse_s = reinterpret_cast<float*>(dot_s + kD * (kMmaCols + 8));  // (kMmaCols) base 2
  float* delta_s = lse_s + kMmaCols;                                     // (kMmaCols)

  const int BH = B * Hkv;
  const int kv_tile = static_cast<int>(blockIdx.x / BH);  // earliest keys first: most queries
  const int bh = static_cast<int>(blockIdx.x % BH);
  const int b = bh / Hkv;
  const int hkv = bh % Hkv;
  const int G = Hq / Hkv;
  const int kv0 = kv_tile * kMmaRows;
  const int warp = threadIdx.x / kLanes;
  const int lane = threadIdx.x % kLanes;
  const int g = lane / 4, t4 = lane % 4;
  const int key[2] = {kv0 + warp * 16 + g, kv0 + warp * 16 + g + 8};  // this thread's two keys

  uint32_t ka[kD / 16][4], va[kD / 16][4];
  load_a_fragments<T, kD>(ka, k, b, key, T_, Hkv, hkv);
  load_a_fragments<T, kD>(va, v, b, key, T_, Hkv, hkv);
  float dk_acc[kDT][4], dv_acc[kDT][4];
#pragma unroll
  for (int dt = 0; dt < kDT; ++dt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) dk_acc[dt][i] = dv_acc[dt][i] = 0.0f;
  }

  // Queries before kv0 see none of these keys; with a window, none at or past the last key + W.
  const int q_end = window > 0 ? min(T_, kv0 + kMmaRows - 1 + window) : T_;
  float s[kNT][4], dp[kNT][4];
  for (int h = hkv * G; h < (hkv + 1) * G; ++h) {
    const int64_t lse_off = (static_cast<int64_t>(b) * Hq + h) * T_;
    for (int q0 = kv0; q0 < q_end; q0 += kMmaCols) {
      // Why: every warp has finished reading the previous query tile before it is overwritten.
      __syncthreads();
      load_tile_mma<T, kD, kMmaCols, kThreads>(q_s, qt_s, q, b, q0, T_, Hq, h);
      load_tile_mma<T, kD, kMmaCols, kThreads>(do_s, dot_s, dout, b, q0, T_, Hq, h);
      if (threadIdx.x < kMmaCols) {
        const int t = q0 + threadIdx.x;
        lse_s[threadIdx.x] = t < T_ ? lse[lse_off + t] * 1.4426950408889634f : 0.0f;
        delta_s[threadIdx.x] = t < T_ ? delta[lse_off + t] : 0.0f;
      }
      // Why: the tiles are complete before any warp reads them.
      __syncthreads();

      mma_rows_by_tile<T, kD, kNT>(s, ka, q_s);    // s^T (keys x queries)
      mma_rows_by_tile<T, kD, kNT>(dp, va, do_s);  // dp^T
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int c = 8 * nt + 2 * t4 + (i % 2);
          const int t = q0 + c;
          const int kv = key[i / 2];
          // also false for padding keys kv >= T
          const bool visible = kv <= t && t < T_ && (window <= 0 || t - kv < window);
          const float p = visible ? exp2f(s[nt][i] * scale_log2 - lse_s[c]) : 0.0f;
          s[nt][i] = p;
          dp[nt][i] = p * (dp[nt][i] - delta_s[c]) * scale;  // ds^T
        }
      }
      mma_scores_by_rows<T, kD, kMmaCols>(dv_acc, s, dot_s);
      mma_scores_by_rows<T, kD, kMmaCols>(dk_acc, dp, qt_s);
    }
  }

#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    if (key[rr] >= T_) continue;  // padding key of the last tile
    const int64_t off = ((static_cast<int64_t>(b) * T_ + key[rr]) * Hkv + hkv) * kD + 2 * t4;
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int64_t o = off + 8 * dt + j;
        dk[o] = from_f32<T>(to_f32(dk[o]) + dk_acc[dt][2 * rr + j]);
        dv[o] = from_f32<T>(to_f32(dv[o]) + dv_acc[dt][2 * rr + j]);
      }
    }
  }
}

// Backward, dk and dv. Block = (key tile, b, kv head); it owns kRows keys and streams, for each of
// the G query heads of its group, the query tiles at or after its first key. With
// p = exp(score - lse) and ds = p (dout·v - delta) / sqrt(D):
//   dv[key] += Σ_t p[t, key] dout[t],   dk[key] += Σ_t ds[t, key] q[t].
// The block alone writes its keys' dk/dv, so the final read-add-write needs no atomics.
template <typename T, int kD>
__global__ void __launch_bounds__(Tile<kD>::kThreads)
    attention_backward_dkdv_kernel(T* dk, T* dv, const T* dout, const float* lse,
                                   const float* delta, const T* q, const T* k, const T* v, int B,
                                   int T_, int Hq, int Hkv, int D, float scale, int window) {
  using Tl = Tile<kD>;
  constexpr int kR = Tl::kRowsPerWarp;
  constexpr int kS = Tl::kStride;
  constexpr int kC = Tl::kColsPerLane;
  ZERO_EXTERN_SHARED(float, smem);
  float* k_s = smem;                          // (kRows, kStride) this block's keys
  float* v_s = k_s + Tl::kOwnedFloats;        // (kRows, kStride) their values
  float* q_s = v_s + Tl::kOwnedFloats;        // (kCols, kStride) one query tile
  float* do_s = q_s + Tl::kStreamedFloats;    // (kCols, kStride) its output gradients
  float* lse_s = do_s + Tl::kStreamedFloats;  // (kCols)
  float* delta_s = lse_s + Tl::kCols;         // (kCols)

  const int BH = B * Hkv;
  // Earliest key tiles first: they are seen by the most queries, so the longest blocks start
  // earliest.
  const int kv_tile = static_cast<int>(blockIdx.x / BH);
  const int bh = static_cast<int>(blockIdx.x % BH);
  const int b = bh / Hkv;
  const int hkv = bh % Hkv;
  const int G = Hq / Hkv;
  const int kv0 = kv_tile * Tl::kRows;
  const int warp = threadIdx.x / kLanes;
  const int lane = threadIdx.x % kLanes;
  const int row0 = warp * kR;  // this warp's first key within the tile

  load_rows<kD, Tl::kRows, Tl::kThreads>(k_s, k, b, kv0, T_, Hkv, hkv, D);
  load_rows<kD, Tl::kRows, Tl::kThreads>(v_s, v, b, kv0, T_, Hkv, hkv, D);

  float dk_acc[kR][kC], dv_acc[kR][kC];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      dk_acc[r][i] = 0.0f;
      dv_acc[r][i] = 0.0f;
    }
  }

  const int q_first = kv0 / Tl::kCols * Tl::kCols;  // queries before kv0 see none of these keys
  for (int h = hkv * G; h < (hkv + 1) * G; ++h) {
    const int64_t lse_off = (static_cast<int64_t>(b) * Hq + h) * T_;
    for (int q0 = q_first; q0 < T_; q0 += Tl::kCols) {
      // Why: every warp has finished reading the previous query tile before it is overwritten.
      __syncthreads();
      load_rows<kD, Tl::kCols, Tl::kThreads>(q_s, q, b, q0, T_, Hq, h, D);
      load_rows<kD, Tl::kCols, Tl::kThreads>(do_s, dout, b, q0, T_, Hq, h, D);
      if (threadIdx.x < Tl::kCols) {
        const int t = q0 + threadIdx.x;
        lse_s[threadIdx.x] = t < T_ ? lse[lse_off + t] : 0.0f;
        delta_s[threadIdx.x] = t < T_ ? delta[lse_off + t] : 0.0f;
      }
      // Why: the tiles (and k_s/v_s, on the first pass) are complete before any warp reads them.
      __syncthreads();

      // Lane j scores query q0 + j against each of the warp's keys, and forms dout·v likewise.
      float s[kR], dp[kR];
#pragma unroll
      for (int r = 0; r < kR; ++r) s[r] = dp[r] = 0.0f;
#pragma unroll 8
      for (int d = 0; d < kD; ++d) {
        const float qd = q_s[lane * kS + d];
        const float dod = do_s[lane * kS + d];
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          s[r] += qd * k_s[(row0 + r) * kS + d];
          dp[r] += dod * v_s[(row0 + r) * kS + d];
        }
      }

      const int t = q0 + lane;
      const float lse_t = lse_s[lane];
      const float delta_t = delta_s[lane];
      float p[kR], ds[kR];
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const int kv = kv0 + row0 + r;
        // also false for padding keys kv >= T
        const bool visible = kv <= t && t < T_ && (window <= 0 || t - kv < window);
        p[r] = visible ? expf(s[r] * scale - lse_t) : 0.0f;
        ds[r] = visible ? p[r] * (dp[r] - delta_t) * scale : 0.0f;
      }

      // dv[key, :] += Σ_j p[j, key] dout[j, :];  dk[key, :] += Σ_j ds[j, key] q[j, :].
#pragma unroll 4
      for (int j = 0; j < Tl::kCols; ++j) {
        float qj[kC], doj[kC];
#pragma unroll
        for (int i = 0; i < kC; ++i) {
          qj[i] = q_s[j * kS + lane + kLanes * i];
          doj[i] = do_s[j * kS + lane + kLanes * i];
        }
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          const float pj = __shfl_sync(kFullMask, p[r], j);
          const float dsj = __shfl_sync(kFullMask, ds[r], j);
#pragma unroll
          for (int i = 0; i < kC; ++i) {
            dv_acc[r][i] += pj * doj[i];
            dk_acc[r][i] += dsj * qj[i];
          }
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int kv = kv0 + row0 + r;
    if (kv >= T_) continue;  // padding key of the last tile
    const int64_t off = ((static_cast<int64_t>(b) * T_ + kv) * Hkv + hkv) * D;
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      const int d = lane + kLanes * i;
      if (d < D) {
        dk[off + d] = from_f32<T>(to_f32(dk[off + d]) + dk_acc[r][i]);
        dv[off + d] = from_f32<T>(to_f32(dv[off + d]) + dv_acc[r][i]);
      }
    }
  }
}

// Backward, dq and delta; runs before the dk/dv kernel, which reads delta. Block = (query tile, b,
// h), the forward's layout; it streams the key tiles at or before its last query row. With
// p = exp(score - lse) and dp = dout·v, the CPU twin's
//   dq[t] = Σ_key p (dp - delta[t]) k[key] / sqrt(D),   delta[t] = Σ_key p dp
// is accumulated in one pass as (Σ p dp k - delta Σ p k) / sqrt(D): delta comes out of the same
// fp32 sums instead of rowsum(dout * out) over the output rounded to T, which in bf16 costs up to
// several percent of dq when D is small (the cancellation in dp - delta amplifies the rounding).
template <typename T, int kD>
__global__ void __launch_bounds__(Tile<kD>::kThreads)
    attention_backward_dq_kernel(T* dq, float* delta, const T* dout, const float* lse, const T* q,
                                 const T* k, const T* v, int B, int T_, int Hq, int Hkv, int D,
                                 float scale, int window) {
  using Tl = Tile<kD>;
  constexpr int kR = Tl::kRowsPerWarp;
  constexpr int kS = Tl::kStride;
  constexpr int kC = Tl::kColsPerLane;
  ZERO_EXTERN_SHARED(float, smem);
  float* q_s = smem;                       // (kRows, kStride) this block's query rows
  float* do_s = q_s + Tl::kOwnedFloats;    // (kRows, kStride) their output gradients
  float* k_s = do_s + Tl::kOwnedFloats;    // (kCols, kStride) one key tile
  float* v_s = k_s + Tl::kStreamedFloats;  // (kCols, kStride) its values

  const int BH = B * Hq;
  const int num_q_tiles = (T_ + Tl::kRows - 1) / Tl::kRows;
  const int q_tile = num_q_tiles - 1 - static_cast<int>(blockIdx.x / BH);  // latest first
  const int bh = static_cast<int>(blockIdx.x % BH);
  const int b = bh / Hq;
  const int h = bh % Hq;
  const int hkv = h / (Hq / Hkv);
  const int q0 = q_tile * Tl::kRows;
  const int warp = threadIdx.x / kLanes;
  const int lane = threadIdx.x % kLanes;
  const int row0 = warp * kR;

  load_rows<kD, Tl::kRows, Tl::kThreads>(q_s, q, b, q0, T_, Hq, h, D);
  load_rows<kD, Tl::kRows, Tl::kThreads>(do_s, dout, b, q0, T_, Hq, h, D);

  // Per row: lse, this lane's part of delta, and the two column sums Σ p dp k and Σ p k.
  float lse_r[kR], delta_lane[kR], pdpk[kR][kC], pk[kR][kC];
#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const int t = q0 + row0 + r;
    lse_r[r] = t < T_ ? lse[(static_cast<int64_t>(b) * Hq + h) * T_ + t] : 0.0f;
    delta_lane[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < kC; ++i) pdpk[r][i] = pk[r][i] = 0.0f;
  }

  const int q_end = min(T_, q0 + Tl::kRows);
  for (int kv0 = 0; kv0 < q_end; kv0 += Tl::kCols) {
    // Why: every warp has finished reading the previous key/value tile before it is overwritten.
    __syncthreads();
    load_rows<kD, Tl::kCols, Tl::kThreads>(k_s, k, b, kv0, T_, Hkv, hkv, D);
    load_rows<kD, Tl::kCols, Tl::kThreads>(v_s, v, b, kv0, T_, Hkv, hkv, D);
    // Why: the tiles (and q_s/do_s, on the first pass) are complete before any warp reads them.
    __syncthreads();

    float s[kR], dp[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) s[r] = dp[r] = 0.0f;
#pragma unroll 8
    for (int d = 0; d < kD; ++d) {
      const float kd = k_s[lane * kS + d];
      const float vd = v_s[lane * kS + d];
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        s[r] += q_s[(row0 + r) * kS + d] * kd;
        dp[r] += do_s[(row0 + r) * kS + d] * vd;
      }
    }

    const int kv = kv0 + lane;
    float p[kR], pdp[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int t = q0 + row0 + r;
      const bool visible = kv <= t && t < T_ && (window <= 0 || t - kv < window);
      p[r] = visible ? expf(s[r] * scale - lse_r[r]) : 0.0f;
      pdp[r] = p[r] * dp[r];
      delta_lane[r] += pdp[r];
    }

    // pdpk[r][:] += Σ_j p dp[r, j] k[j, :];  pk[r][:] += Σ_j p[r, j] k[j, :].
#pragma unroll 4
    for (int j = 0; j < Tl::kCols; ++j) {
      float kj[kC];
#pragma unroll
      for (int i = 0; i < kC; ++i) kj[i] = k_s[j * kS + lane + kLanes * i];
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        const float pj = __shfl_sync(kFullMask, p[r], j);
        const float pdpj = __shfl_sync(kFullMask, pdp[r], j);
#pragma unroll
        for (int i = 0; i < kC; ++i) {
          pk[r][i] += pj * kj[i];
          pdpk[r][i] += pdpj * kj[i];
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kR; ++r) {
    const float delta_t = warp_sum(delta_lane[r]);  // all lanes take part, padding rows too
    const int t = q0 + row0 + r;
    if (t >= T_) continue;
    if (lane == 0) delta[(static_cast<int64_t>(b) * Hq + h) * T_ + t] = delta_t;
    const int64_t off = ((static_cast<int64_t>(b) * T_ + t) * Hq + h) * D;
#pragma unroll
    for (int i = 0; i < kC; ++i) {
      const int d = lane + kLanes * i;
      if (d < D) {
        const float grad = (pdpk[r][i] - delta_t * pk[r][i]) * scale;
        dq[off + d] = from_f32<T>(to_f32(dq[off + d]) + grad);
      }
    }
  }
}

// Shape checks shared by both directions; false when there is nothing to do.
bool check_attention_shape(int64_t B, int64_t T_, int64_t Hq, int64_t Hkv, int64_t D) {
  ZERO_CHECK(B >= 0 && T_ >= 0 && Hq >= 0, "attention: bad shape B ", B, " T ", T_, " Hq ", Hq);
  ZERO_CHECK(Hkv > 0 && Hq % Hkv == 0, "attention: Hq ", Hq, " not a multiple of Hkv ", Hkv);
  ZERO_CHECK(D >= 1 && D <= kMaxHeadDim, "attention: head_dim ", D, " outside [1, ", kMaxHeadDim,
             "]");
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  // Block indices enumerate (tile, b, head) in 32 bits; tiles hold >= 16 rows.
  ZERO_CHECK(T_ <= kIntMax / 2 && B * Hq <= kIntMax / 2 && (T_ / 16 + 1) * B * Hq <= kIntMax,
             "attention: shape too large for the grid: B ", B, " T ", T_, " Hq ", Hq);
  return B > 0 && T_ > 0 && Hq > 0;
}

// Calls launch(std::integral_constant<int, kD>{}) for the smallest bucket kD >= D: the one place
// that maps a runtime head dim to a compiled kernel.
template <typename Launch>
void dispatch_head_dim(int64_t D, Launch&& launch) {
  if (D <= 32) {
    launch(std::integral_constant<int, 32>{});
  } else if (D <= 64) {
    launch(std::integral_constant<int, 64>{});
  } else if (D <= 128) {
    launch(std::integral_constant<int, 128>{});
  } else {
    launch(std::integral_constant<int, 256>{});
  }
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

}  // namespace

template <typename T>
void attention_forward(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B,
                       int64_t T_, int64_t Hq, int64_t Hkv, int64_t D, cudaStream_t stream,
                       int64_t window, double score_divisor) {
  if (!check_attention_shape(B, T_, Hq, Hkv, D)) return;
  const float scale = 1.0f / (std::sqrt(static_cast<float>(D)) * static_cast<float>(score_divisor));
  const int window_i = static_cast<int>(window);
  if constexpr (!std::is_same_v<T, float>) {
    // 16-bit inputs at the common head dims take the tensor cores (pairs loaded as 32 bits).
    const auto aligned4 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; };
    if ((D == 64 || D == 128) && aligned4(out) && aligned4(q) && aligned4(k) && aligned4(v)) {
      const float scale_log2 = scale * 1.4426950408889634f;
      const int64_t blocks = (T_ + kMmaRows - 1) / kMmaRows * B * Hq;
      const auto launch = [&](auto kernel, size_t smem_elems) {
        launch_with_smem(kernel, blocks, kMmaWarps * kLanes, smem_elems * sizeof(T), stream, out,
                         lse, q, k, v, static_cast<int>(B), static_cast<int>(T_),
                         static_cast<int>(Hq), static_cast<int>(Hkv), scale_log2, window_i);
      };
      if (D == 64) {
        launch(attention_forward_mma_kernel<T, 64>, MmaTile<64>::kSmemElems);
      } else {
        launch(attention_forward_mma_kernel<T, 128>, MmaTile<128>::kSmemElems);
      }
      return;
    }
  }
  dispatch_head_dim(D, [&](auto bucket) {
    constexpr int kD = decltype(bucket)::value;
    using Tl = Tile<kD>;
    const int64_t blocks = (T_ + Tl::kRows - 1) / Tl::kRows * B * Hq;
    const size_t smem_bytes = (Tl::kOwnedFloats + 2 * Tl::kStreamedFloats) * sizeof(float);
    launch_with_smem(attention_forward_kernel<T, kD>, blocks, Tl::kThreads, smem_bytes, stream, out,
                     lse, q, k, v, static_cast<int>(B), static_cast<int>(T_), static_cast<int>(Hq),
                     static_cast<int>(Hkv), static_cast<int>(D), scale, window_i);
  });
}

size_t attention_backward_scratch_bytes(int64_t B, int64_t T_, int64_t Hq, int64_t Hkv, int64_t D) {
  return static_cast<size_t>(B * Hq * T_) * sizeof(float);  // delta (B, Hq, T)
}

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const float* lse,
                        const T* q, const T* k, const T* v, int64_t B, int64_t T_, int64_t Hq,
                        int64_t Hkv, int64_t D, void* scratch, cudaStream_t stream, int64_t window,
                        double score_divisor) {
  if (!check_attention_shape(B, T_, Hq, Hkv, D)) return;
  ZERO_CHECK(scratch != nullptr && reinterpret_cast<uintptr_t>(scratch) % alignof(float) == 0,
             "attention_backward: scratch must be 4-byte-aligned device memory");
  float* delta = static_cast<float*>(scratch);  // (B, Hq, T), written by the dq kernel
  const float scale = 1.0f / (std::sqrt(static_cast<float>(D)) * static_cast<float>(score_divisor));
  const int window_i = static_cast<int>(window);
  const int Bi = static_cast<int>(B), Ti = static_cast<int>(T_), Hqi = static_cast<int>(Hq);
  const int Hkvi = static_cast<int>(Hkv), Di = static_cast<int>(D);
  if constexpr (!std::is_same_v<T, float>) {
    // 16-bit inputs at D = 64 take the tensor cores (D = 128 would spill the dk/dv kernel's
    // registers as written: two A operands and two accumulators of 16 x 128).
    const auto aligned4 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; };
    if (D == 64 && aligned4(dq) && aligned4(dk) && aligned4(dv) && aligned4(dout) && aligned4(q) &&
        aligned4(k) && aligned4(v)) {
      constexpr int kD = 64;
      using Tl = MmaBackwardTile<kD>;
      const float scale_log2 = scale * 1.4426950408889634f;
      const int64_t dq_blocks = (T_ + kMmaRows - 1) / kMmaRows * B * Hq;
      launch_with_smem(attention_backward_dq_mma_kernel<T, kD>, dq_blocks, kMmaWarps * kLanes,
                       Tl::kDqElems * sizeof(T), stream, dq, delta, dout, lse, q, k, v, Bi, Ti, Hqi,
                       Hkvi, scale, scale_log2, window_i);
      // Stream order makes the dk/dv kernel see every delta the dq kernel wrote.
      const int64_t dkdv_blocks = (T_ + kMmaRows - 1) / kMmaRows * B * Hkv;
      launch_with_smem(attention_backward_dkdv_mma_kernel<T, kD>, dkdv_blocks, kMmaWarps * kLanes,
                       Tl::kDkdvElems * sizeof(T) + 2 * kMmaCols * sizeof(float), stream, dk, dv,
                       dout, lse, static_cast<const float*>(delta), q, k, v, Bi, Ti, Hqi, Hkvi,
                       scale, scale_log2, window_i);
      return;
    }
  }
  dispatch_head_dim(D, [&](auto bucket) {
    constexpr int kD = decltype(bucket)::value;
    using Tl = Tile<kD>;
    const size_t dq_smem_bytes = (2 * Tl::kOwnedFloats + 2 * Tl::kStreamedFloats) * sizeof(float);
    const int64_t dq_blocks = (T_ + Tl::kRows - 1) / Tl::kRows * B * Hq;
    launch_with_smem(attention_backward_dq_kernel<T, kD>, dq_blocks, Tl::kThreads, dq_smem_bytes,
                     stream, dq, delta, dout, lse, q, k, v, Bi, Ti, Hqi, Hkvi, Di, scale, window_i);

    // Stream order makes the dk/dv kernel see every delta the dq kernel wrote.
    const size_t dkdv_smem_bytes =
        (2 * Tl::kOwnedFloats + 2 * Tl::kStreamedFloats + 2 * Tl::kCols) * sizeof(float);
    const int64_t dkdv_blocks = (T_ + Tl::kRows - 1) / Tl::kRows * B * Hkv;
    launch_with_smem(attention_backward_dkdv_kernel<T, kD>, dkdv_blocks, Tl::kThreads,
                     dkdv_smem_bytes, stream, dk, dv, dout, lse, static_cast<const float*>(delta),
                     q, k, v, Bi, Ti, Hqi, Hkvi, Di, scale, window_i);
  });
}

#define ZERO_INSTANTIATE_ATTENTION_CUDA(T)                                                       \
  template void attention_forward<T>(T*, float*, const T*, const T*, const T*, int64_t, int64_t, \
                                     int64_t, int64_t, int64_t, cudaStream_t, int64_t, double);  \
  template void attention_backward<T>(T*, T*, T*, const T*, const T*, const float*, const T*,    \
                                      const T*, const T*, int64_t, int64_t, int64_t, int64_t,    \
                                      int64_t, void*, cudaStream_t, int64_t, double);
ZERO_INSTANTIATE_ATTENTION_CUDA(float)
ZERO_INSTANTIATE_ATTENTION_CUDA(__nv_bfloat16)
ZERO_INSTANTIATE_ATTENTION_CUDA(__half)
#undef ZERO_INSTANTIATE_ATTENTION_CUDA

}  // namespace zero::kernels::cuda
