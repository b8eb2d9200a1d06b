// LAMB against an fp64 scalar reference of DeepSpeed's FusedLamb formula (lamb.h).
#include "optim/lamb.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace zero::optim {
namespace {

// fp64 reference of one LAMB step on one tensor; returns the trust ratio.
double ref_lamb(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v,
                const std::vector<double>& g, const LambArgs& a) {
  const double bc1 = 1 - std::pow(double(a.beta1), double(a.step));
  const double bc2 = 1 - std::pow(double(a.beta2), double(a.step));
  const double step_size = a.bias_correction ? a.lr * std::sqrt(bc2) / bc1 : a.lr;
  std::vector<double> u(p.size());
  double w_sq = 0, u_sq = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    m[i] = a.beta1 * m[i] + (1 - double(a.beta1)) * g[i];
    v[i] = a.beta2 * v[i] + (1 - double(a.beta2)) * g[i] * g[i];
    const double d = a.eps_inside_sqrt ? std::sqrt(v[i] + a.eps) : std::sqrt(v[i]) + a.eps;
    u[i] = m[i] / d + a.weight_decay * p[i];
    w_sq += p[i] * p[i];
    u_sq += u[i] * u[i];
  }
  double ratio = 1;
  if (w_sq != 0 && u_sq != 0) {
    ratio = std::min<double>(a.max_coeff, std::max<double>(a.min_coeff, std::sqrt(w_sq / u_sq)));
  }
  for (size_t i = 0; i < p.size(); ++i) p[i] -= step_size * ratio * u[i];
  return ratio;
}

struct Case {
  bool bias_correction;
  bool eps_inside_sqrt;
  float max_coeff;
};

class LambTest : public ::testing::TestWithParam<Case> {};

TEST_P(LambTest, MatchesFp64ReferencePerTensor) {
  const Case c = GetParam();
  // Three tensors: 5 elements, 1 element, 6000 elements (spans two norm chunks).
  const std::vector<int64_t> offsets = {0, 5, 6, 6006};
  const int64_t n = offsets.back();
  std::vector<float> p(n), g(n), m(n, 0.f), v(n, 0.f);
  for (int64_t i = 0; i < n; ++i) p[i] = 0.5f * std::sin(0.3f * i + 1.0f);
  LambArgs a;
  a.lr = 2e-3f;
  a.beta1 = 0.9f;
  a.beta2 = 0.99f;
  a.eps = 1e-6f;
  a.weight_decay = 0.01f;
  a.max_coeff = c.max_coeff;
  a.bias_correction = c.bias_correction;
  a.eps_inside_sqrt = c.eps_inside_sqrt;

  std::vector<std::vector<double>> rp, rm, rv;
  for (size_t t = 0; t + 1 < offsets.size(); ++t) {
    rp.emplace_back(p.begin() + offsets[t], p.begin() + offsets[t + 1]);
    rm.emplace_back(offsets[t + 1] - offsets[t], 0.0);
    rv.emplace_back(offsets[t + 1] - offsets[t], 0.0);
  }
  const float grad_scale = 1.0f / 256.0f;
  for (int step = 1; step <= 4; ++step) {
    a.step = step;
    for (int64_t i = 0; i < n; ++i) g[i] = 256.0f * std::cos(0.7f * i + step) * (1 + i % 3);
    AdamShard shard{p.data(), g.data(), m.data(), v.data(), n};
    const std::vector<float> ratios = lamb_update(a, shard, offsets, grad_scale);
    ASSERT_EQ(ratios.size(), 3u);
    for (size_t t = 0; t + 1 < offsets.size(); ++t) {
      std::vector<double> gt;
      for (int64_t i = offsets[t]; i < offsets[t + 1]; ++i) gt.push_back(g[i] * double(grad_scale));
      const double want_ratio = ref_lamb(rp[t], rm[t], rv[t], gt, a);
      EXPECT_NEAR(ratios[t], want_ratio, 1e-5 * want_ratio) << "tensor " << t << " step " << step;
      for (int64_t i = offsets[t]; i < offsets[t + 1]; ++i) {
        EXPECT_NEAR(p[i], rp[t][i - offsets[t]], 2e-6) << "tensor " << t << " i " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, LambTest,
                         ::testing::Values(Case{true, false, 10.0f}, Case{false, false, 10.0f},
                                           Case{true, true, 10.0f}, Case{true, false, 0.5f}));

TEST(Lamb, ZeroWeightsGiveTrustRatioOne) {
  std::vector<float> p(4, 0.f), g = {1.f, -2.f, 3.f, 0.5f}, m(4, 0.f), v(4, 0.f);
  const std::vector<int64_t> offsets = {0, 4};
  LambArgs a;
  const auto ratios =
      lamb_update(a, AdamShard{p.data(), g.data(), m.data(), v.data(), 4}, offsets, 1.0f);
  EXPECT_EQ(ratios[0], 1.0f);
  // With ratio 1 and bias correction: p = -lr * sqrt(bc2)/bc1 * m/(sqrt(v)+eps) ~ -lr*sign(g).
  EXPECT_NEAR(p[0], -a.lr * std::sqrt(0.001) / 0.1 * 0.1 / (std::sqrt(0.001) + 1e-8), 1e-8);
}

TEST(Lamb, ClampsToMinCoeff) {
  // Tiny weights, large update: ||w|| / ||u|| << min_coeff.
  std::vector<float> p = {1e-6f, 1e-6f}, g = {1.f, 1.f}, m(2, 0.f), v(2, 0.f);
  const std::vector<int64_t> offsets = {0, 2};
  LambArgs a;
  const auto ratios =
      lamb_update(a, AdamShard{p.data(), g.data(), m.data(), v.data(), 2}, offsets, 1.0f);
  EXPECT_EQ(ratios[0], a.min_coeff);
}

}  // namespace
}  // namespace zero::optim
