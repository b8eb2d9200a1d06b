// CUDA causal GQA attention on the tensor cores (mma.sync, kernels/mma.cuh) for 16-bit inputs:
// the forward at head dims 64 and 128 and the backward at 64, with their launchers. The CUDA-core
// kernels and the entry points that choose between them are in attention_cuda.cu; shared tile
// geometry and helpers in attention_internal_cuda.cuh. Legend as in attention_cuda.cu.
#include "kernels/attention/attention_internal_cuda.cuh"

namespace zero::kernels::cuda {
namespace attention_internal {
namespace {

// kSoftcap: the soft-capping compiled in or out. The tensor-core kernels' registers are tight: as a
// runtime branch it made the dq kernel spill and the kD = 128 forward take 29 more registers with
// the cap off; as a flag, the kernels without it use no more registers than before soft-capping
// (ptxas, sm_90) and spill nothing.
template <typename T, int kD, bool kSoftcap>
__global__ void __launch_bounds__(kMmaWarps* kLanes)
    attention_forward_mma_kernel(T* out, float* lse, const T* q, const T* k, const T* v, int B,
                                 int T_, int Hq, int Hkv, float scale, float scale_log2, int window,
                                 float softcap) {
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
        if constexpr (kSoftcap) {  // base 2 after the cap: cap tanh(s scale / cap) log2 e
          s[nt][i] = soft_cap(s[nt][i] * scale, softcap, nullptr) * 1.4426950408889634f;
        } else {
          s[nt][i] *= scale_log2;
        }
        s[nt][i] = visible ? s[nt][i] : -INFINITY;
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
// p = exp(score - lse), dp = dout·v, delta = Σ_key p dp and ds = p (dp - delta) scale (times
// tanh's slope with a softcap):
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

template <typename T, int kD, bool kSoftcap>
__global__ void __launch_bounds__(kMmaWarps* kLanes)
    attention_backward_dq_mma_kernel(T* dq, float* delta, const T* dout, const float* lse,
                                     const T* q, const T* k, const T* v, int B, int T_, int Hq,
                                     int Hkv, float scale, float scale_log2, int window,
                                     float softcap) {
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
  // p and dp of one key tile, masked: p = 0 where a key is not visible; with kSoftcap, tanh's
  // slope at each score into `slope`.
  float s[kNT][4], dp[kNT][4];
  float slope[kSoftcap ? kNT : 1][4];
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
        float score2;
        if constexpr (kSoftcap) {
          score2 = soft_cap(s[nt][i] * scale, softcap, &slope[nt][i]) * 1.4426950408889634f;
        } else {
          score2 = s[nt][i] * scale_log2;
        }
        s[nt][i] = visible ? exp2f(score2 - lse2[i / 2]) : 0.0f;
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
      for (int i = 0; i < 4; ++i) {
        s[nt][i] = s[nt][i] * (dp[nt][i] - dl[i / 2]) * scale;  // ds
        if constexpr (kSoftcap) s[nt][i] *= slope[nt][i];
      }
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

template <typename T, int kD, bool kSoftcap>
__global__ void __launch_bounds__(kMmaWarps* kLanes)
    attention_backward_dkdv_mma_kernel(T* dk, T* dv, const T* dout, const float* lse,
                                       const float* delta, const T* q, const T* k, const T* v,
                                       int B, int T_, int Hq, int Hkv, float scale,
                                       float scale_log2, int window, float softcap) {
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
          float score2, slope = 1.0f;
          if constexpr (kSoftcap) {
            score2 = soft_cap(s[nt][i] * scale, softcap, &slope) * 1.4426950408889634f;
          } else {
            score2 = s[nt][i] * scale_log2;
          }
          const float p = visible ? exp2f(score2 - lse_s[c]) : 0.0f;
          s[nt][i] = p;
          dp[nt][i] = p * (dp[nt][i] - delta_s[c]) * scale;  // ds^T
          if constexpr (kSoftcap) dp[nt][i] *= slope;
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

bool aligned4(const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; }

}  // namespace

template <typename T>
bool attention_forward_mma(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B,
                           int64_t T_, int64_t Hq, int64_t Hkv, int64_t D, cudaStream_t stream,
                           float scale, int window_i, float softcap) {
  // Pairs are loaded as 32 bits.
  if (!((D == 64 || D == 128) && aligned4(out) && aligned4(q) && aligned4(k) && aligned4(v))) {
    return false;
  }
  const float scale_log2 = scale * 1.4426950408889634f;
  const int64_t blocks = (T_ + kMmaRows - 1) / kMmaRows * B * Hq;
  const auto launch = [&](auto kernel, size_t smem_elems) {
    launch_with_smem(kernel, blocks, kMmaWarps * kLanes, smem_elems * sizeof(T), stream, out, lse,
                     q, k, v, static_cast<int>(B), static_cast<int>(T_), static_cast<int>(Hq),
                     static_cast<int>(Hkv), scale, scale_log2, window_i, softcap);
  };
  const bool capped = softcap > 0;
  if (D == 64) {
    launch(capped ? attention_forward_mma_kernel<T, 64, true>
                  : attention_forward_mma_kernel<T, 64, false>,
           MmaTile<64>::kSmemElems);
  } else {
    launch(capped ? attention_forward_mma_kernel<T, 128, true>
                  : attention_forward_mma_kernel<T, 128, false>,
           MmaTile<128>::kSmemElems);
  }
  return true;
}

template <typename T>
bool attention_backward_mma(T* dq, T* dk, T* dv, const T* dout, const float* lse, const T* q,
                            const T* k, const T* v, int64_t B, int64_t T_, int64_t Hq, int64_t Hkv,
                            int64_t D, float* delta, cudaStream_t stream, float scale, int window_i,
                            float softcap) {
  // D = 128 would spill the dk/dv kernel's registers as written: two A operands and two
  // accumulators of 16 x 128.
  if (!(D == 64 && aligned4(dq) && aligned4(dk) && aligned4(dv) && aligned4(dout) && aligned4(q) &&
        aligned4(k) && aligned4(v))) {
    return false;
  }
  constexpr int kD = 64;
  using Tl = MmaBackwardTile<kD>;
  const int Bi = static_cast<int>(B), Ti = static_cast<int>(T_), Hqi = static_cast<int>(Hq);
  const int Hkvi = static_cast<int>(Hkv);
  const float scale_log2 = scale * 1.4426950408889634f;
  const int64_t dq_blocks = (T_ + kMmaRows - 1) / kMmaRows * B * Hq;
  launch_with_smem(softcap > 0 ? attention_backward_dq_mma_kernel<T, kD, true>
                               : attention_backward_dq_mma_kernel<T, kD, false>,
                   dq_blocks, kMmaWarps * kLanes, Tl::kDqElems * sizeof(T), stream, dq, delta, dout,
                   lse, q, k, v, Bi, Ti, Hqi, Hkvi, scale, scale_log2, window_i, softcap);
  // Stream order makes the dk/dv kernel see every delta the dq kernel wrote.
  const int64_t dkdv_blocks = (T_ + kMmaRows - 1) / kMmaRows * B * Hkv;
  launch_with_smem(softcap > 0 ? attention_backward_dkdv_mma_kernel<T, kD, true>
                               : attention_backward_dkdv_mma_kernel<T, kD, false>,
                   dkdv_blocks, kMmaWarps * kLanes,
                   Tl::kDkdvElems * sizeof(T) + 2 * kMmaCols * sizeof(float), stream, dk, dv, dout,
                   lse, static_cast<const float*>(delta), q, k, v, Bi, Ti, Hqi, Hkvi, scale,
                   scale_log2, window_i, softcap);
  return true;
}

#define ZERO_INSTANTIATE_ATTENTION_MMA(T)                                                         \
  template bool attention_forward_mma<T>(T*, float*, const T*, const T*, const T*, int64_t,       \
                                         int64_t, int64_t, int64_t, int64_t, cudaStream_t, float, \
                                         int, float);                                             \
  template bool attention_backward_mma<T>(T*, T*, T*, const T*, const float*, const T*, const T*, \
                                          const T*, int64_t, int64_t, int64_t, int64_t, int64_t,  \
                                          float*, cudaStream_t, float, int, float);
ZERO_INSTANTIATE_ATTENTION_MMA(__nv_bfloat16)
ZERO_INSTANTIATE_ATTENTION_MMA(__half)
#undef ZERO_INSTANTIATE_ATTENTION_MMA

}  // namespace attention_internal
}  // namespace zero::kernels::cuda
