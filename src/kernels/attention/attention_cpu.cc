// CPU reference for causal grouped-query attention: plain loops, one softmax row at a time.
// Legend: B batch, T time, Hq / Hkv heads, D head_dim, G = Hq / Hkv query heads per kv head.
// q/out/dq are (B, T, Hq, D); k/v/dk/dv are (B, T, Hkv, D); att is (B, Hq, T, T).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/check.h"
#include "kernels/attention/attention.h"

namespace zero::kernels::cpu {

template <typename T>
void attention_forward(T* out, T* att, const T* q, const T* k, const T* v, int64_t B, int64_t T_,
                       int64_t Hq, int64_t Hkv, int64_t D) {
  ZERO_CHECK(Hkv > 0 && Hq % Hkv == 0, "attention: Hq ", Hq, " not a multiple of Hkv ", Hkv);
  const int64_t G = Hq / Hkv;
  const T scale = T(1) / std::sqrt(static_cast<T>(D));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hkv = h / G;
      T* att_TT = att + (b * Hq + h) * T_ * T_;
      for (int64_t t = 0; t < T_; ++t) {
        const T* q_D = q + ((b * T_ + t) * Hq + h) * D;
        T* att_T = att_TT + t * T_;
        // Scores for the visible keys s <= t, then a max-subtracted softmax.
        T max_score = -std::numeric_limits<T>::infinity();
        for (int64_t s = 0; s <= t; ++s) {
          const T* k_D = k + ((b * T_ + s) * Hkv + hkv) * D;
          T score = 0;
          for (int64_t d = 0; d < D; ++d) score += q_D[d] * k_D[d];
          score *= scale;
          att_T[s] = score;
          max_score = std::max(max_score, score);
        }
        T sum = 0;
        for (int64_t s = 0; s <= t; ++s) {
          att_T[s] = std::exp(att_T[s] - max_score);
          sum += att_T[s];
        }
        const T inv_sum = T(1) / sum;
        for (int64_t s = 0; s <= t; ++s) att_T[s] *= inv_sum;
        for (int64_t s = t + 1; s < T_; ++s) att_T[s] = 0;
        // out[t] = Σ_s att[t, s] v[s].
        T* out_D = out + ((b * T_ + t) * Hq + h) * D;
        for (int64_t d = 0; d < D; ++d) out_D[d] = 0;
        for (int64_t s = 0; s <= t; ++s) {
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
                        const T* v, int64_t B, int64_t T_, int64_t Hq, int64_t Hkv, int64_t D) {
  ZERO_CHECK(Hkv > 0 && Hq % Hkv == 0, "attention: Hq ", Hq, " not a multiple of Hkv ", Hkv);
  const int64_t G = Hq / Hkv;
  const T scale = T(1) / std::sqrt(static_cast<T>(D));
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
            const T dpre = att_T[s] * (dpre_T[s] - att_dot_datt) * scale;
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
                                     int64_t, int64_t, int64_t);                             \
  template void attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*,    \
                                      const T*, int64_t, int64_t, int64_t, int64_t, int64_t);
ZERO_INSTANTIATE_ATTENTION(float)
ZERO_INSTANTIATE_ATTENTION(double)
#undef ZERO_INSTANTIATE_ATTENTION

}  // namespace zero::kernels::cpu
