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

// The tensor-core kernels for 16-bit inputs are in attention_mma_cuda.cu; what both use in
// attention_internal_cuda.cuh.

#include "kernels/attention/attention_internal_cuda.cuh"

namespace zero::kernels::cuda {
namespace {

using namespace attention_internal;  // NOLINT(google-build-using-namespace): this op's own helpers

// Forward. Block = (query tile, b, h); it streams the key tiles at or before its last query row.
// Each warp keeps, for each of its rows, the running max m, the running Σ exp(score - m) l and the
// unnormalised output acc (fp32, columns lane + 32 i).
template <typename T, int kD>
__global__ void __launch_bounds__(Tile<kD>::kThreads)
    attention_forward_kernel(T* out, float* lse, const T* q, const T* k, const T* v, int B, int T_,
                             int Hq, int Hkv, int D, float scale, int window, float softcap) {
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
      float score = visible ? s[r] * scale : -INFINITY;
      if (softcap > 0 && visible) score = soft_cap(score, softcap, nullptr);
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

// Backward, dk and dv. Block = (key tile, b, kv head); it owns kRows keys and streams, for each of
// the G query heads of its group, the query tiles at or after its first key. With
// p = exp(score - lse) and ds = p (dout·v - delta) * scale (times tanh's slope with a softcap):
//   dv[key] += Σ_t p[t, key] dout[t],   dk[key] += Σ_t ds[t, key] q[t].
// The block alone writes its keys' dk/dv, so the final read-add-write needs no atomics.
template <typename T, int kD>
__global__ void __launch_bounds__(Tile<kD>::kThreads)
    attention_backward_dkdv_kernel(T* dk, T* dv, const T* dout, const float* lse,
                                   const float* delta, const T* q, const T* k, const T* v, int B,
                                   int T_, int Hq, int Hkv, int D, float scale, int window,
                                   float softcap) {
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
        float score = s[r] * scale, slope = 1.0f;
        if (softcap > 0 && visible) score = soft_cap(score, softcap, &slope);
        p[r] = visible ? expf(score - lse_t) : 0.0f;
        ds[r] = visible ? p[r] * (dp[r] - delta_t) * scale * slope : 0.0f;
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
// is accumulated in one pass as (Σ p dp k - delta Σ p k) / sqrt(D) (with a softcap, p in both
// column sums times tanh's slope at that score; delta stays Σ p dp): delta comes out of the same
// fp32 sums instead of rowsum(dout * out) over the output rounded to T, which in bf16 costs up to
// several percent of dq when D is small (the cancellation in dp - delta amplifies the rounding).
template <typename T, int kD>
__global__ void __launch_bounds__(Tile<kD>::kThreads)
    attention_backward_dq_kernel(T* dq, float* delta, const T* dout, const float* lse, const T* q,
                                 const T* k, const T* v, int B, int T_, int Hq, int Hkv, int D,
                                 float scale, int window, float softcap) {
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
    float p[kR], pdp[kR];  // p and p dp, each times tanh's slope with a softcap (delta's without)
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int t = q0 + row0 + r;
      const bool visible = kv <= t && t < T_ && (window <= 0 || t - kv < window);
      float score = s[r] * scale, slope = 1.0f;
      if (softcap > 0 && visible) score = soft_cap(score, softcap, &slope);
      p[r] = visible ? expf(score - lse_r[r]) : 0.0f;
      pdp[r] = p[r] * dp[r];
      delta_lane[r] += pdp[r];
      if (softcap > 0) {
        p[r] *= slope;
        pdp[r] *= slope;
      }
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

}  // namespace

template <typename T>
void attention_forward(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B,
                       int64_t T_, int64_t Hq, int64_t Hkv, int64_t D, cudaStream_t stream,
                       int64_t window, double score_divisor, double softcap) {
  if (!check_attention_shape(B, T_, Hq, Hkv, D)) return;
  ZERO_CHECK(softcap >= 0, "attention: softcap ", softcap, " < 0");
  const float scale = 1.0f / (std::sqrt(static_cast<float>(D)) * static_cast<float>(score_divisor));
  const int window_i = static_cast<int>(window);
  const float cap = static_cast<float>(softcap);
  if constexpr (!std::is_same_v<T, float>) {
    // 16-bit inputs at the common head dims take the tensor cores (attention_mma_cuda.cu).
    if (attention_forward_mma(out, lse, q, k, v, B, T_, Hq, Hkv, D, stream, scale, window_i, cap)) {
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
                     static_cast<int>(Hkv), static_cast<int>(D), scale, window_i, cap);
  });
}

size_t attention_backward_scratch_bytes(int64_t B, int64_t T_, int64_t Hq, int64_t Hkv, int64_t D) {
  return static_cast<size_t>(B * Hq * T_) * sizeof(float);  // delta (B, Hq, T)
}

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const float* lse,
                        const T* q, const T* k, const T* v, int64_t B, int64_t T_, int64_t Hq,
                        int64_t Hkv, int64_t D, void* scratch, cudaStream_t stream, int64_t window,
                        double score_divisor, double softcap) {
  if (!check_attention_shape(B, T_, Hq, Hkv, D)) return;
  ZERO_CHECK(softcap >= 0, "attention: softcap ", softcap, " < 0");
  const float cap = static_cast<float>(softcap);
  ZERO_CHECK(scratch != nullptr && reinterpret_cast<uintptr_t>(scratch) % alignof(float) == 0,
             "attention_backward: scratch must be 4-byte-aligned device memory");
  float* delta = static_cast<float*>(scratch);  // (B, Hq, T), written by the dq kernel
  const float scale = 1.0f / (std::sqrt(static_cast<float>(D)) * static_cast<float>(score_divisor));
  const int window_i = static_cast<int>(window);
  const int Bi = static_cast<int>(B), Ti = static_cast<int>(T_), Hqi = static_cast<int>(Hq);
  const int Hkvi = static_cast<int>(Hkv), Di = static_cast<int>(D);
  if constexpr (!std::is_same_v<T, float>) {
    // 16-bit inputs at D = 64 take the tensor cores (attention_mma_cuda.cu).
    if (attention_backward_mma(dq, dk, dv, dout, lse, q, k, v, B, T_, Hq, Hkv, D, delta, stream,
                               scale, window_i, cap)) {
      return;
    }
  }
  dispatch_head_dim(D, [&](auto bucket) {
    constexpr int kD = decltype(bucket)::value;
    using Tl = Tile<kD>;
    const size_t dq_smem_bytes = (2 * Tl::kOwnedFloats + 2 * Tl::kStreamedFloats) * sizeof(float);
    const int64_t dq_blocks = (T_ + Tl::kRows - 1) / Tl::kRows * B * Hq;
    launch_with_smem(attention_backward_dq_kernel<T, kD>, dq_blocks, Tl::kThreads, dq_smem_bytes,
                     stream, dq, delta, dout, lse, q, k, v, Bi, Ti, Hqi, Hkvi, Di, scale, window_i,
                     cap);

    // Stream order makes the dk/dv kernel see every delta the dq kernel wrote.
    const size_t dkdv_smem_bytes =
        (2 * Tl::kOwnedFloats + 2 * Tl::kStreamedFloats + 2 * Tl::kCols) * sizeof(float);
    const int64_t dkdv_blocks = (T_ + Tl::kRows - 1) / Tl::kRows * B * Hkv;
    launch_with_smem(attention_backward_dkdv_kernel<T, kD>, dkdv_blocks, Tl::kThreads,
                     dkdv_smem_bytes, stream, dk, dv, dout, lse, static_cast<const float*>(delta),
                     q, k, v, Bi, Ti, Hqi, Hkvi, Di, scale, window_i, cap);
  });
}

#define ZERO_INSTANTIATE_ATTENTION_CUDA(T)                                                       \
  template void attention_forward<T>(T*, float*, const T*, const T*, const T*, int64_t, int64_t, \
                                     int64_t, int64_t, int64_t, cudaStream_t, int64_t, double,   \
                                     double);                                                    \
  template void attention_backward<T>(T*, T*, T*, const T*, const T*, const float*, const T*,    \
                                      const T*, const T*, int64_t, int64_t, int64_t, int64_t,    \
                                      int64_t, void*, cudaStream_t, int64_t, double, double);
ZERO_INSTANTIATE_ATTENTION_CUDA(float)
ZERO_INSTANTIATE_ATTENTION_CUDA(__nv_bfloat16)
ZERO_INSTANTIATE_ATTENTION_CUDA(__half)
#undef ZERO_INSTANTIATE_ATTENTION_CUDA

}  // namespace zero::kernels::cuda
