// CPU twin of LayerNorm over the last dim. Legend: N rows, C channels.
// Rows are independent (parallel over rows); dweight/dbias sum over rows, parallel over channel
// blocks with rows in order, so results do not depend on the thread count.
#include <cmath>
#include <cstdint>

#include "kernels/layernorm/layernorm.h"

namespace zero::kernels::cpu {
namespace {

constexpr int64_t kChannelBlock = 64;

}  // namespace

template <typename T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias,
                       int64_t N, int64_t C, T eps) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;  // (C)
    T* y = out + n * C;        // (C)
    T sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += x[c];
    const T m = sum / T(C);
    T var_sum = 0;  // two-pass variance: no cancellation from E[x²] - m²
    for (int64_t c = 0; c < C; ++c) var_sum += (x[c] - m) * (x[c] - m);
    const T s = T(1) / std::sqrt(var_sum / T(C) + eps);
    for (int64_t c = 0; c < C; ++c) {
      const T norm = (x[c] - m) * s;
      y[c] = norm * weight[c] + (bias ? bias[c] : T(0));
    }
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                        const T* mean, const T* rstd, int64_t N, int64_t C) {
  // dinp = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * weight.
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;    // (C)
    const T* dy = dout + n * C;  // (C)
    T* dx = dinp + n * C;        // (C)
    const T m = mean[n], s = rstd[n];
    T dnorm_sum = 0, dnorm_norm_sum = 0;
    for (int64_t c = 0; c < C; ++c) {
      const T dnorm = dy[c] * weight[c];
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * (x[c] - m) * s;
    }
    const T dnorm_mean = dnorm_sum / T(C);
    const T dnorm_norm_mean = dnorm_norm_sum / T(C);
    for (int64_t c = 0; c < C; ++c) {
      const T norm = (x[c] - m) * s;
      dx[c] += (dy[c] * weight[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
  const int64_t num_blocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for
  for (int64_t blk = 0; blk < num_blocks; ++blk) {
    const int64_t c0 = blk * kChannelBlock;
    const int64_t c1 = c0 + kChannelBlock < C ? c0 + kChannelBlock : C;
    for (int64_t n = 0; n < N; ++n) {
      const T* x = inp + n * C;    // (C)
      const T* dy = dout + n * C;  // (C)
      const T m = mean[n], s = rstd[n];
      for (int64_t c = c0; c < c1; ++c) {
        dweight[c] += dy[c] * (x[c] - m) * s;
        if (dbias) dbias[c] += dy[c];
      }
    }
  }
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*,
                                       const float*, int64_t, int64_t, float);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*,
                                        const double*, int64_t, int64_t, double);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*,
                                        const float*, const float*, const float*, int64_t, int64_t);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*,
                                         const double*, const double*, const double*, int64_t,
                                         int64_t);

}  // namespace zero::kernels::cpu
