// CPU twin of the token (+ learned position) embedding. Legend: B batch, T time, C channels, V
// vocab. The backward scatter-add is parallel over channel blocks so each gradient element receives
// its contributions in (b, t) order: the result does not depend on the thread count.
#include <cstdint>

#include "core/check.h"
#include "kernels/encoder/encoder.h"

namespace zero::kernels::cpu {
namespace {

constexpr int64_t kChannelBlock = 64;

}  // namespace

template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                     int64_t T_, int64_t C, int64_t V) {
#pragma omp parallel for
  for (int64_t bt = 0; bt < B * T_; ++bt) {
    const int32_t token = tokens[bt];
    ZERO_CHECK(token >= 0 && token < V, "token id ", token, " out of [0, ", V, ") at ", bt);
    T* out_bt = out + bt * C;            // (C)
    const T* wte_row = wte + token * C;  // (C)
    if (wpe) {
      const T* wpe_row = wpe + (bt % T_) * C;  // (C)
      for (int64_t c = 0; c < C; ++c) out_bt[c] = wte_row[c] + wpe_row[c];
    } else {
      for (int64_t c = 0; c < C; ++c) out_bt[c] = wte_row[c];
    }
  }
}

template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t T_,
                      int64_t C, int64_t V) {
  for (int64_t bt = 0; bt < B * T_; ++bt) {
    ZERO_CHECK(tokens[bt] >= 0 && tokens[bt] < V, "token id ", tokens[bt], " out of [0, ", V,
               ") at ", bt);
  }
  const int64_t num_blocks = (C + kChannelBlock - 1) / kChannelBlock;
#pragma omp parallel for
  for (int64_t blk = 0; blk < num_blocks; ++blk) {
    const int64_t c0 = blk * kChannelBlock;
    const int64_t c1 = c0 + kChannelBlock < C ? c0 + kChannelBlock : C;
    for (int64_t bt = 0; bt < B * T_; ++bt) {
      const T* dout_bt = dout + bt * C;     // (C)
      T* dwte_row = dwte + tokens[bt] * C;  // (C)
      for (int64_t c = c0; c < c1; ++c) dwte_row[c] += dout_bt[c];
      if (dwpe) {
        T* dwpe_row = dwpe + (bt % T_) * C;  // (C)
        for (int64_t c = c0; c < c1; ++c) dwpe_row[c] += dout_bt[c];
      }
    }
  }
}

template void encoder_forward<float>(float*, const int32_t*, const float*, const float*, int64_t,
                                     int64_t, int64_t, int64_t);
template void encoder_forward<double>(double*, const int32_t*, const double*, const double*,
                                      int64_t, int64_t, int64_t, int64_t);
template void encoder_backward<float>(float*, float*, const float*, const int32_t*, int64_t,
                                      int64_t, int64_t, int64_t);
template void encoder_backward<double>(double*, double*, const double*, const int32_t*, int64_t,
                                       int64_t, int64_t, int64_t);

}  // namespace zero::kernels::cpu
