// CPU causal grouped-query attention. double: the readable reference, plain loops, one softmax row
// at a time. float (training): the same math per (batch, head) through OpenBLAS sgemm on the full
// T x T score matrix (the masked half is computed and discarded: still ~5x faster than the loops),
// single-threaded sgemm inside an OpenMP task per head, so results do not depend on thread count.
// Legend: B batch, T time, Hq / Hkv heads, D head_dim, G = Hq / Hkv query heads per kv head.
// q/out/dq are (B, T, Hq, D); k/v/dk/dv are (B, T, Hkv, D); att is (B, Hq, T, T).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "kernels/attention/attention.h"
#include "kernels/vector_math.h"

namespace zero::kernels::cpu {

namespace {

// Row-major C(m, n) = alpha op(A) op(B) + beta C.
void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a,
              static_cast<int>(lda), b, static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

// The first key query t sees: 0, or t - window + 1 with a sliding window.
inline int64_t first_key(int64_t t, int64_t window) {
  return window > 0 ? std::max<int64_t>(0, t - window + 1) : 0;
}

// Masked softmax of each row t of scores(T, T) over first_key(t) <= s <= t, in place; the other
// entries become 0.
void causal_softmax_rows(float* att_TT, int64_t T_, int64_t window) {
  for (int64_t t = 0; t < T_; ++t) {
    float* row = att_TT + t * T_;
    const int64_t s0 = first_key(t, window);
    float max_score = -std::numeric_limits<float>::infinity();
    for (int64_t s = s0; s <= t; ++s) max_score = std::max(max_score, row[s]);
    const float sum = exp_shifted_sum_inplace(row + s0, t - s0 + 1, max_score);
    const float inv_sum = 1.0f / sum;
    for (int64_t s = 0; s < s0; ++s) row[s] = 0;
    for (int64_t s = s0; s <= t; ++s) row[s] *= inv_sum;
    for (int64_t s = t + 1; s < T_; ++s) row[s] = 0;
  }
}

void attention_forward_blas(float* out, float* att, const float* q, const float* k, const float* v,
                            int64_t B, int64_t T_, int64_t Hq, int64_t Hkv, int64_t D,
                            int64_t window, double score_divisor, double softcap) {
  const int64_t G = Hq / Hkv;
  const float cap = static_cast<float>(softcap);
  const float scale = 1.0f / (std::sqrt(static_cast<float>(D)) * static_cast<float>(score_divisor));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hkv = h / G;
      float* att_TT = att + (b * Hq + h) * T_ * T_;
      const float* q_h = q + (b * T_ * Hq + h) * D;
      const float* k_h = k + (b * T_ * Hkv + hkv) * D;
      const float* v_h = v + (b * T_ * Hkv + hkv) * D;
      // scores = scale q k^T; softmax; out = att v.
      sgemm(false, true, T_, T_, D, scale, q_h, Hq * D, k_h, Hkv * D, 0.0f, att_TT, T_);
      if (cap > 0) {
        for (int64_t i = 0; i < T_ * T_; ++i) att_TT[i] = cap * std::tanh(att_TT[i] / cap);
      }
      causal_softmax_rows(att_TT, T_, window);
      sgemm(false, false, T_, D, T_, 1.0f, att_TT, T_, v_h, Hkv * D, 0.0f,
            out + (b * T_ * Hq + h) * D, Hq * D);
    }
  }
}

void attention_backward_blas(float* dq, float* dk, float* dv, const float* dout, const float* att,
                             const float* q, const float* k, const float* v, int64_t B, int64_t T_,
                             int64_t Hq, int64_t Hkv, int64_t D, double score_divisor,
                             double softcap) {
  const int64_t G = Hq / Hkv;
  const float scale = 1.0f / (std::sqrt(static_cast<float>(D)) * static_cast<float>(score_divisor));
  const float cap = static_cast<float>(softcap);
  // One task per (b, kv head), as the reference: it owns dk/dv of that kv head and dq of its G
  // query heads, so sums over query heads run in a fixed order.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t hkv = 0; hkv < Hkv; ++hkv) {
      std::vector<float> datt(static_cast<size_t>(T_ * T_));
      std::vector<float> capped(cap > 0 ? static_cast<size_t>(T_ * T_) : 0);
      const float* k_h = k + (b * T_ * Hkv + hkv) * D;
      const float* v_h = v + (b * T_ * Hkv + hkv) * D;
      float* dk_h = dk + (b * T_ * Hkv + hkv) * D;
      float* dv_h = dv + (b * T_ * Hkv + hkv) * D;
      for (int64_t h = hkv * G; h < (hkv + 1) * G; ++h) {
        const float* att_TT = att + (b * Hq + h) * T_ * T_;
        const float* dout_h = dout + (b * T_ * Hq + h) * D;
        const float* q_h = q + (b * T_ * Hq + h) * D;
        float* dq_h = dq + (b * T_ * Hq + h) * D;
        // datt = dout v^T; dv += att^T dout.
        sgemm(false, true, T_, T_, D, 1.0f, dout_h, Hq * D, v_h, Hkv * D, 0.0f, datt.data(), T_);
        sgemm(true, false, T_, D, T_, 1.0f, att_TT, T_, dout_h, Hq * D, 1.0f, dv_h, Hkv * D);
        // Softcap: tanh of the scores again, for d(cap tanh(x / cap)) / dx = 1 - tanh^2.
        if (cap > 0) {
          sgemm(false, true, T_, T_, D, scale, q_h, Hq * D, k_h, Hkv * D, 0.0f, capped.data(), T_);
          for (float& x : capped) x = std::tanh(x / cap);
        }
        // Softmax backward into dpre (in place of datt), scaled; 0 above the diagonal.
        for (int64_t t = 0; t < T_; ++t) {
          const float* p = att_TT + t * T_;
          float* d = datt.data() + t * T_;
          float dot = 0;
          for (int64_t s = 0; s <= t; ++s) dot += p[s] * d[s];
          for (int64_t s = 0; s <= t; ++s) d[s] = p[s] * (d[s] - dot) * scale;
          if (cap > 0) {
            const float* th = capped.data() + t * T_;
            for (int64_t s = 0; s <= t; ++s) d[s] *= 1.0f - th[s] * th[s];
          }
          for (int64_t s = t + 1; s < T_; ++s) d[s] = 0;
        }
        // dq += dpre k; dk += dpre^T q.
        sgemm(false, false, T_, D, T_, 1.0f, datt.data(), T_, k_h, Hkv * D, 1.0f, dq_h, Hq * D);
        sgemm(true, false, T_, D, T_, 1.0f, datt.data(), T_, q_h, Hq * D, 1.0f, dk_h, Hkv * D);
      }
    }
  }
}

}  // namespace

template <typename T>
void attention_forward(T* out, T* att, const T* q, const T* k, const T* v, int64_t B, int64_t T_,
                       int64_t Hq, int64_t Hkv, int64_t D, int64_t window, double score_divisor,
                       double softcap) {
  ZERO_CHECK(Hkv > 0 && Hq % Hkv == 0, "attention: Hq ", Hq, " not a multiple of Hkv ", Hkv);
  ZERO_CHECK(window >= 0 && score_divisor > 0 && softcap >= 0, "attention: window ", window,
             " score_divisor ", score_divisor, " softcap ", softcap);
  if constexpr (std::is_same_v<T, float>) {
    attention_forward_blas(out, att, q, k, v, B, T_, Hq, Hkv, D, window, score_divisor, softcap);
    return;
  }
  const int64_t G = Hq / Hkv;
  const T scale = T(1) / (std::sqrt(static_cast<T>(D)) * static_cast<T>(score_divisor));
  const T cap = static_cast<T>(softcap);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hkv = h / G;
      T* att_TT = att + (b * Hq + h) * T_ * T_;
      for (int64_t t = 0; t < T_; ++t) {
        const T* q_D = q + ((b * T_ + t) * Hq + h) * D;
        T* att_T = att_TT + t * T_;
        // Scores for the visible keys s0 <= s <= t, then a max-subtracted softmax.
        const int64_t s0 = first_key(t, window);
        T max_score = -std::numeric_limits<T>::infinity();
        for (int64_t s = 0; s < s0; ++s) att_T[s] = 0;
        for (int64_t s = s0; s <= t; ++s) {
          const T* k_D = k + ((b * T_ + s) * Hkv + hkv) * D;
          T score = 0;
          for (int64_t d = 0; d < D; ++d) score += q_D[d] * k_D[d];
          score *= scale;
          if (cap > 0) score = cap * std::tanh(score / cap);
          att_T[s] = score;
          max_score = std::max(max_score, score);
        }
        T sum = 0;
        for (int64_t s = s0; s <= t; ++s) {
          att_T[s] = std::exp(att_T[s] - max_score);
          sum += att_T[s];
        }
        const T inv_sum = T(1) / sum;
        for (int64_t s = s0; s <= t; ++s) att_T[s] *= inv_sum;
        for (int64_t s = t + 1; s < T_; ++s) att_T[s] = 0;
        // out[t] = Σ_s att[t, s] v[s].
        T* out_D = out + ((b * T_ + t) * Hq + h) * D;
        for (int64_t d = 0; d < D; ++d) out_D[d] = 0;
        for (int64_t s = s0; s <= t; ++s) {
          const T* v_D = v + ((b * T_ + s) * Hkv + hkv) * D;
          const T p = att_T[s];
          for (int64_t d = 0; d < D; ++d) out_D[d] += p * v_D[d];
        }
      }
    }
  }
}

template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k,
                        const T* v, int64_t B, int64_t T_, int64_t Hq, int64_t Hkv, int64_t D,
                        double score_divisor, double softcap) {
  ZERO_CHECK(Hkv > 0 && Hq % Hkv == 0, "attention: Hq ", Hq, " not a multiple of Hkv ", Hkv);
  if constexpr (std::is_same_v<T, float>) {
    attention_backward_blas(dq, dk, dv, dout, att, q, k, v, B, T_, Hq, Hkv, D, score_divisor,
                            softcap);
    return;
  }
  const int64_t G = Hq / Hkv;
  const T scale = T(1) / (std::sqrt(static_cast<T>(D)) * static_cast<T>(score_divisor));
  const T cap = static_cast<T>(softcap);
  // One task per (b, kv head): it owns dk/dv of that kv head and dq of its G query heads, so the
  // sums over query heads run in a fixed order and the result does not depend on the thread count.
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t hkv = 0; hkv < Hkv; ++hkv) {
      std::vector<T> dpre_T(static_cast<size_t>(T_));
      for (int64_t h = hkv * G; h < (hkv + 1) * G; ++h) {
        const T* att_TT = att + (b * Hq + h) * T_ * T_;
        for (int64_t t = 0; t < T_; ++t) {
          const T* att_T = att_TT + t * T_;
          const T* dout_D = dout + ((b * T_ + t) * Hq + h) * D;
          const T* q_D = q + ((b * T_ + t) * Hq + h) * D;
          T* dq_D = dq + ((b * T_ + t) * Hq + h) * D;
          // datt[s] = dout[t]·v[s]; dv[s] += att[t, s] dout[t].
          T att_dot_datt = 0;
          for (int64_t s = 0; s <= t; ++s) {
            const int64_t kv_off = ((b * T_ + s) * Hkv + hkv) * D;
            const T* v_D = v + kv_off;
            T* dv_D = dv + kv_off;
            const T p = att_T[s];
            T datt = 0;
            for (int64_t d = 0; d < D; ++d) {
              datt += dout_D[d] * v_D[d];
              dv_D[d] += p * dout_D[d];
            }
            dpre_T[s] = datt;
            att_dot_datt += p * datt;
          }
          // Softmax backward, then through the scaled scores: dq[t] += Σ dpre k[s], dk[s] += dpre
          // q[t].
          for (int64_t s = 0; s <= t; ++s) {
            const int64_t kv_off = ((b * T_ + s) * Hkv + hkv) * D;
            const T* k_D = k + kv_off;
            T* dk_D = dk + kv_off;
            T dpre = att_T[s] * (dpre_T[s] - att_dot_datt) * scale;
            if (cap > 0) {  // through cap * tanh(score / cap): 1 - tanh^2
              T score = 0;
              for (int64_t d = 0; d < D; ++d) score += q_D[d] * k_D[d];
              const T th = std::tanh(score * scale / cap);
              dpre *= T(1) - th * th;
            }
            for (int64_t d = 0; d < D; ++d) {
              dq_D[d] += dpre * k_D[d];
              dk_D[d] += dpre * q_D[d];
            }
          }
        }
      }
    }
  }
}

#define ZERO_INSTANTIATE_ATTENTION(T)                                                        \
  template void attention_forward<T>(T*, T*, const T*, const T*, const T*, int64_t, int64_t, \
                                     int64_t, int64_t, int64_t, int64_t, double, double);    \
  template void attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,    \
                                      const T*, int64_t, int64_t, int64_t, int64_t, int64_t, \
                                      double, double);
ZERO_INSTANTIATE_ATTENTION(float)
ZERO_INSTANTIATE_ATTENTION(double)
#undef ZERO_INSTANTIATE_ATTENTION

}  // namespace zero::kernels::cpu
