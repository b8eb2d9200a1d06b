// CPU twin of RMSNorm (Llama): out = inp * rsqrt(mean(inp²) + eps) * weight, computed in T.
// Legend: N rows, C channels. dweight sums over rows, parallel over channel blocks with rows in
// order, so results do not depend on the thread count.
#include <cmath>
#include <cstdint>

#include "kernels/rmsnorm/rmsnorm.h"

namespace zero::kernels::cpu {
namespace {

constexpr int64_t kChannelBlock = 64;

}  // namespace

template <typename T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* weight, int64_t N, int64_t C, T eps) {
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;  // (C)
    T* y = out + n * C;        // (C)
    T sum_sq = 0;
    for (int64_t c = 0; c < C; ++c) sum_sq += x[c] * x[c];
    const T s = T(1) / std::sqrt(sum_sq / T(C) + eps);
    // HF order: (x * rstd) first, then times the weight.
    for (int64_t c = 0; c < C; ++c) y[c] = (x[c] * s) * weight[c];
    rstd[n] = s;
  }
}

template <typename T>
void rmsnorm_backward(T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const T* rstd, int64_t N, int64_t C) {
  // dinp = rstd * (dnorm - norm * mean(dnorm * norm)), norm = x * rstd, dnorm = dout * weight.
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    const T* x = inp + n * C;    // (C)
    const T* dy = dout + n * C;  // (C)
    T* dx = dinp + n * C;        // (C)
    const T s = rstd[n];
    T dnorm_norm_sum = 0;
    for (int64_t c = 0; c < C; ++c) dnorm_norm_sum += dy[c] * weight[c] * x[c] * s;
    const T dnorm_norm_mean = dnorm_norm_sum / T(C);
    for (int64_t c = 0; c < C; ++c) {
      dx[c] += (dy[c] * weight[c] - x[c] * s * dnorm_norm_mean) * s;
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
      const T s = rstd[n];
      for (int64_t c = c0; c < c1; ++c) dweight[c] += dy[c] * x[c] * s;
    }
  }
}

template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int64_t, int64_t,
                                     float);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int64_t,
                                      int64_t, double);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*,
                                      const float*, int64_t, int64_t);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*,
                                       const double*, const double*, int64_t, int64_t);

}  // namespace zero::kernels::cpu
