// Tests for CPU softmax cross-entropy: torch values, FD gradients, ignore_index, in-place backward,
// large logits and odd vocabulary sizes. Legend: N positions, V vocab.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/grad_check.h"

namespace zero::kernels::cpu {
namespace {

using testing::max_rel_error;
using testing::numeric_grad;
using testing::random_vector;
using testing::to_float;

// Expected values from torch.nn.functional.cross_entropy (float64, torch 1.13): reduction='none'
// for the losses; reduction='mean' (3 counted rows, so dloss = 1/3) for the gradient.
TEST(CrossEntropy, MatchesTorch) {
  const int64_t N = 4, V = 5;
  const std::vector<double> logits = {0.5,  -1.25, 2.0, 0.0, 3.5, -2.0, 1.0, 0.25, -0.75, 0.5,
                                      10.0, -10.0, 0.0, 5.0, 1.0, 1.5,  1.5, 1.5,  1.5,   1.5};
  const std::vector<int32_t> targets = {2, 4, kIgnoreIndex, 0};
  const std::vector<double> want_losses = {1.771374555100119, 1.3339773453440547, 0.0,
                                           1.6094379124341003};
  const std::vector<double> want_dlogits = {0.012651407011753298,
                                            0.0021984848866289813,
                                            -0.2766336608043602,
                                            0.007673466241131764,
                                            0.2541103026648462,
                                            0.007207813492990626,
                                            0.14477280404891346,
                                            0.06838583037923568,
                                            0.025157741063958267,
                                            -0.245524188985098,
                                            0.0,
                                            0.0,
                                            0.0,
                                            0.0,
                                            0.0,
                                            -0.26666666666666666,
                                            0.06666666666666667,
                                            0.06666666666666667,
                                            0.06666666666666667,
                                            0.06666666666666667};
  std::vector<double> losses(N, 9.0);
  cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V);
  for (int64_t n = 0; n < N; ++n) EXPECT_NEAR(losses[n], want_losses[n], 1e-14) << n;
  const std::vector<double> dloss(N, 1.0 / 3.0);
  std::vector<double> dlogits(N * V, 9.0);
  cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), dloss.data(), N, V);
  for (int64_t i = 0; i < N * V; ++i) EXPECT_NEAR(dlogits[i], want_dlogits[i], 1e-15) << i;

  // float: same values to float precision.
  const auto logits_f = to_float(logits);
  std::vector<float> losses_f(N), dlogits_f(N * V), dloss_f(N, 1.0f / 3.0f);
  cross_entropy_forward(losses_f.data(), logits_f.data(), targets.data(), N, V);
  cross_entropy_backward(dlogits_f.data(), logits_f.data(), targets.data(), dloss_f.data(), N, V);
  for (int64_t n = 0; n < N; ++n) EXPECT_NEAR(losses_f[n], want_losses[n], 1e-6) << n;
  for (int64_t i = 0; i < N * V; ++i) EXPECT_NEAR(dlogits_f[i], want_dlogits[i], 1e-7) << i;
}

class CrossEntropyVocab : public ::testing::TestWithParam<int64_t> {};

std::vector<int32_t> make_targets(int64_t N, int64_t V, uint64_t seed) {
  const auto r = random_vector(N, seed, 0.0, 1.0);
  std::vector<int32_t> t(N);
  for (int64_t n = 0; n < N; ++n) t[n] = static_cast<int32_t>(std::min<double>(V - 1, r[n] * V));
  t[N / 2] = kIgnoreIndex;
  return t;
}

TEST_P(CrossEntropyVocab, BackwardMatchesFiniteDifferences) {
  const int64_t N = 6, V = GetParam();
  auto logits = random_vector(N * V, 1, -3, 3);
  const auto targets = make_targets(N, V, 2);
  const auto dloss = random_vector(N, 3, 0.1, 1.0);
  std::vector<double> losses(N);
  auto loss = [&] {
    cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V);
    return testing::dot(dloss, losses.data(), N);
  };
  const auto want = numeric_grad(logits, loss);
  std::vector<double> dlogits(N * V, 5.0);
  cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), dloss.data(), N, V);
  EXPECT_LT(max_rel_error(dlogits, want), 1e-8);
}

TEST_P(CrossEntropyVocab, IgnoredRowsGiveZeroLossAndGradient) {
  const int64_t N = 5, V = GetParam();
  const auto logits = random_vector(N * V, 4, -3, 3);
  const std::vector<int32_t> targets = {kIgnoreIndex, 0, kIgnoreIndex, static_cast<int32_t>(V - 1),
                                        kIgnoreIndex};
  std::vector<double> losses(N, 7.0), dlogits(N * V, 7.0), dloss(N, 1.0);
  cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V);
  cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), dloss.data(), N, V);
  for (int64_t n : {0, 2, 4}) {
    EXPECT_EQ(losses[n], 0.0);
    for (int64_t v = 0; v < V; ++v) EXPECT_EQ(dlogits[n * V + v], 0.0);
  }
  for (int64_t n : {1, 3}) {
    EXPECT_GE(losses[n], 0.0);
    double row_sum = 0;  // softmax - onehot sums to zero
    for (int64_t v = 0; v < V; ++v) row_sum += dlogits[n * V + v];
    EXPECT_NEAR(row_sum, 0.0, 1e-14);
  }
}

TEST_P(CrossEntropyVocab, BackwardInPlaceOverLogits) {
  const int64_t N = 7, V = GetParam();
  const auto logits = to_float(random_vector(N * V, 5, -4, 4));
  const auto targets = make_targets(N, V, 6);
  const auto dloss = to_float(random_vector(N, 7, 0.1, 1.0));
  std::vector<float> dlogits(N * V);
  cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), dloss.data(), N, V);
  auto fused = logits;
  cross_entropy_backward(fused.data(), fused.data(), targets.data(), dloss.data(), N, V);
  EXPECT_EQ(fused, dlogits);
}

TEST_P(CrossEntropyVocab, LargeLogitsStayFinite) {
  const int64_t N = 4, V = GetParam();
  auto logits_d = random_vector(N * V, 8, -1, 1);
  for (auto& x : logits_d) x *= 1e4;
  // Row 0: target 0 leads every other logit by at least 1e4, so its loss underflows to 0.
  for (int64_t v = 1; v < V; ++v) logits_d[v] = -std::fabs(logits_d[v]);
  logits_d[0] = 1e4;
  const auto logits = to_float(logits_d);
  std::vector<int32_t> targets = make_targets(N, V, 9);
  targets[0] = 0;
  std::vector<float> losses(N), dlogits(N * V), dloss(N, 1.0f);
  cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V);
  cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), dloss.data(), N, V);
  for (float x : losses) {
    EXPECT_TRUE(std::isfinite(x));
    EXPECT_GE(x, 0.0f);
  }
  for (float x : dlogits) {
    EXPECT_TRUE(std::isfinite(x));
    EXPECT_LE(std::fabs(x), 1.0f);
  }
  EXPECT_NEAR(losses[0], 0.0f, 1e-6f);
}

TEST(CrossEntropy, SingleTokenVocabHasZeroLoss) {
  const std::vector<float> logits = {123.0f, -4.0f};
  const std::vector<int32_t> targets = {0, 0};
  std::vector<float> losses(2), dlogits(2), dloss(2, 1.0f);
  cross_entropy_forward(losses.data(), logits.data(), targets.data(), 2, 1);
  cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), dloss.data(), 2, 1);
  EXPECT_EQ(losses, (std::vector<float>{0.0f, 0.0f}));
  EXPECT_EQ(dlogits, (std::vector<float>{0.0f, 0.0f}));
}

INSTANTIATE_TEST_SUITE_P(Vocab, CrossEntropyVocab, ::testing::Values(1, 2, 7, 257));

}  // namespace
}  // namespace zero::kernels::cpu
