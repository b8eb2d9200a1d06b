// CPU reference for softmax cross-entropy: max-subtracted logsumexp per row, double accumulators.
// Legend: N positions (B*T), V vocab. logits/dlogits are (N, V); targets/losses/dloss are (N).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/check.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/vector_math.h"

namespace zero::kernels::cpu {
namespace {

struct RowStats {
  double max_logit;
  double sum_exp;  // Σ exp(logit - max_logit), >= 1
};

template <typename T>
RowStats row_stats(const T* logits_V, int64_t V) {
  if constexpr (std::is_same_v<T, float>) {
    const double max_logit = vector_max(logits_V, V);
    // fp32 exp of (logit - max), vectorised (vector_math.h: <= 2 ulp), summed in fp64; max_logit
    // is one of the logits, so the float shift is exact.
    return {max_logit, exp_shifted_sum_f64(logits_V, V, static_cast<float>(max_logit))};
  }
  double max_logit = logits_V[0];
  for (int64_t v = 1; v < V; ++v) max_logit = std::max(max_logit, static_cast<double>(logits_V[v]));
  double sum_exp = 0;
  for (int64_t v = 0; v < V; ++v) sum_exp += std::exp(static_cast<double>(logits_V[v]) - max_logit);
  return {max_logit, sum_exp};
}

void check_target(int32_t target, int64_t n, int64_t V) {
  ZERO_CHECK(target == kIgnoreIndex || (target >= 0 && target < V), "cross_entropy: target ",
             target, " at row ", n, " outside [0, ", V, ")");
}

}  // namespace

template <typename T>
void cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int64_t N,
                           int64_t V) {
  ZERO_CHECK(V > 0, "cross_entropy: empty vocabulary");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int32_t target = targets[n];
    check_target(target, n, V);
    if (target == kIgnoreIndex) {
      losses[n] = 0;
      continue;
    }
    const T* logits_V = logits + n * V;
    const RowStats st = row_stats(logits_V, V);
    losses[n] =
        static_cast<T>(std::log(st.sum_exp) + st.max_logit - static_cast<double>(logits_V[target]));
  }
}

template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const int32_t* targets, const T* dloss,
                            int64_t N, int64_t V) {
  ZERO_CHECK(V > 0, "cross_entropy: empty vocabulary");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int32_t target = targets[n];
    check_target(target, n, V);
    T* dlogits_V = dlogits + n * V;
    if (target == kIgnoreIndex) {
      std::fill(dlogits_V, dlogits_V + V, T(0));
      continue;
    }
    // The row's stats are taken before any write, and each element is read before it is written,
    // so dlogits may alias logits.
    const T* logits_V = logits + n * V;
    const RowStats st = row_stats(logits_V, V);
    const double scale = static_cast<double>(dloss[n]) / st.sum_exp;
    const double dl = static_cast<double>(dloss[n]);
    if constexpr (std::is_same_v<T, float>) {
      // fp32 softmax · dloss, vectorised; the target's -dloss is subtracted in fp64 afterwards
      // (its own logit was read before the vector pass wrote it).
      const double p_target =
          std::exp(static_cast<double>(logits_V[target]) - st.max_logit) * scale;
      exp_shifted_scaled(dlogits_V, logits_V, V, static_cast<float>(st.max_logit),
                         static_cast<float>(scale));
      dlogits_V[target] = static_cast<T>(p_target - dl);
      continue;
    }
    for (int64_t v = 0; v < V; ++v) {
      const double p_scaled = std::exp(static_cast<double>(logits_V[v]) - st.max_logit) * scale;
      dlogits_V[v] = static_cast<T>(v == target ? p_scaled - dl : p_scaled);
    }
  }
}

#define ZERO_INSTANTIATE_CROSS_ENTROPY(T)                                                 \
  template void cross_entropy_forward<T>(T*, const T*, const int32_t*, int64_t, int64_t); \
  template void cross_entropy_backward<T>(T*, const T*, const int32_t*, const T*, int64_t, int64_t);
ZERO_INSTANTIATE_CROSS_ENTROPY(float)
ZERO_INSTANTIATE_CROSS_ENTROPY(double)
#undef ZERO_INSTANTIATE_CROSS_ENTROPY

}  // namespace zero::kernels::cpu
