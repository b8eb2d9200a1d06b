// Tests for vector_math.h: exp against double over a dense sweep of floats with the documented
// bound (2 ulp for normal results), special values, AVX2 and AVX-512 agreeing bitwise, the
// softmax/cross-entropy loops against double, and GELU forward/backward against the double
// formula, over lengths that are not multiples of the vector width.
#include "kernels/vector_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace zero::kernels::cpu {
namespace {

using detail::VectorIsa;

std::vector<VectorIsa> vector_isas() {
  std::vector<VectorIsa> isas;
  for (VectorIsa isa : {VectorIsa::kAvx2, VectorIsa::kAvx512}) {
    if (detail::vector_isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

// Distance in units in the last place of the float nearest to `want`.
double ulps(float got, double want) {
  const float w = static_cast<float>(want);
  const double ulp =
      std::nextafter(std::fabs(w), std::numeric_limits<float>::infinity()) - std::fabs(w);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

TEST(VectorExp, WithinTwoUlpOverADenseSweep) {
  // Every 61st float in [-104, 89]: about 35 million arguments.
  std::vector<float> x;
  for (float lo : {-104.0f, 0.0f}) {
    const float hi = lo < 0 ? 0.0f : 89.0f;
    for (uint32_t u = bits(lo < 0 ? -0.0f : 0.0f);; u += 61) {
      float f;
      std::memcpy(&f, &u, sizeof f);
      if (lo < 0 ? f < lo : f > hi) break;
      x.push_back(f);
    }
  }
  std::vector<float> y(x.size());
  for (VectorIsa isa : vector_isas()) {
    detail::vector_math_fns(isa).exp(y.data(), x.data(), static_cast<int64_t>(x.size()));
    double max_ulp = 0, max_abs_subnormal = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = std::exp(static_cast<double>(x[i]));
      if (want > std::numeric_limits<float>::max()) {
        ASSERT_TRUE(std::isinf(y[i])) << x[i];
      } else if (want >= std::numeric_limits<float>::min()) {
        max_ulp = std::max(max_ulp, ulps(y[i], want));
      } else {
        max_abs_subnormal = std::max(max_abs_subnormal, std::fabs(y[i] - want));
      }
    }
    EXPECT_LE(max_ulp, 2.0) << static_cast<int>(isa);
    EXPECT_LE(max_abs_subnormal, std::numeric_limits<float>::min()) << static_cast<int>(isa);
    std::printf("isa %d: max error %.3f ulp (normal results), %.3g absolute (subnormal)\n",
                static_cast<int>(isa), max_ulp, max_abs_subnormal);
  }
}

TEST(VectorExp, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          89.0f,
                          100.0f,
                          inf,
                          -inf,
                          -104.0f,
                          -200.0f,
                          std::numeric_limits<float>::quiet_NaN()};
  for (VectorIsa isa : vector_isas()) {
    std::vector<float> y(x.size());
    detail::vector_math_fns(isa).exp(y.data(), x.data(), static_cast<int64_t>(x.size()));
    EXPECT_EQ(y[0], 1.0f);
    EXPECT_EQ(y[1], 1.0f);
    EXPECT_LE(ulps(y[2], std::exp(1.0)), 2.0);
    EXPECT_LE(ulps(y[3], std::exp(-1.0)), 2.0);
    EXPECT_TRUE(std::isinf(y[4]) && y[4] > 0);
    EXPECT_TRUE(std::isinf(y[5]) && y[5] > 0);
    EXPECT_TRUE(std::isinf(y[6]) && y[6] > 0);
    EXPECT_EQ(y[7], 0.0f);
    EXPECT_EQ(y[8], 0.0f);
    EXPECT_EQ(y[9], 0.0f);
    EXPECT_TRUE(std::isnan(y[10]));
  }
}

std::vector<float> random_floats(int64_t n, float scale, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = dist(gen);
  return v;
}

TEST(VectorExp, Avx2AndAvx512AgreeBitwise) {
  if (vector_isas().size() < 2) GTEST_SKIP() << "needs both AVX2 and AVX-512";
  const auto x = random_floats(1001, 30.0f, 1);
  std::vector<float> a(x.size()), b(x.size());
  detail::vector_math_fns(VectorIsa::kAvx2).exp(a.data(), x.data(), 1001);
  detail::vector_math_fns(VectorIsa::kAvx512).exp(b.data(), x.data(), 1001);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(bits(a[i]), bits(b[i])) << x[i];
}

TEST(VectorMax, MatchesTheScalarMaxOverOddLengths) {
  for (VectorIsa isa : vector_isas()) {
    for (int64_t n : {1, 7, 8, 15, 16, 17, 100, 50257}) {
      auto x = random_floats(n, 4.0f, static_cast<uint32_t>(n + 7));
      for (int64_t where : {int64_t{0}, n / 2, n - 1}) {
        std::vector<float> y = x;
        y[where] = 1e30f;
        EXPECT_EQ(detail::vector_math_fns(isa).max(y.data(), n), 1e30f) << n << " " << where;
      }
    }
    EXPECT_EQ(detail::vector_math_fns(isa).max(nullptr, 0),
              -std::numeric_limits<float>::infinity());
  }
}

TEST(VectorSoftmaxLoops, MatchDoubleOverOddLengths) {
  for (VectorIsa isa : vector_isas()) {
    const detail::VectorMathFns& f = detail::vector_math_fns(isa);
    for (int64_t n : {1, 7, 8, 15, 16, 17, 100, 50257}) {
      const auto x = random_floats(n, 4.0f, static_cast<uint32_t>(n));
      float max_x = x[0];
      for (float v : x) max_x = std::max(max_x, v);
      double want_sum = 0;
      for (float v : x) want_sum += std::exp(static_cast<double>(v - max_x));
      // Σ of positive terms each within 2 ulp: the sum is within 2 ulp (fp64) or 2 ulp + n·2^-24
      // relative (fp32 lanes).
      EXPECT_NEAR(f.exp_shifted_sum_f64(x.data(), n, max_x), want_sum, want_sum * 2.5e-7) << n;
      std::vector<float> y = x;
      const float sum = f.exp_shifted_sum_inplace(y.data(), n, max_x);
      EXPECT_NEAR(sum, want_sum, want_sum * (2.5e-7 + n * 6e-8)) << n;
      std::vector<float> z(x.size());
      f.exp_shifted_scaled(z.data(), x.data(), n, max_x, 0.25f);
      for (int64_t i = 0; i < n; ++i) {
        // The shift is applied in fp32 (x - max rounds), so the reference is exp of that float.
        const double e = std::exp(static_cast<double>(x[i] - max_x));
        ASSERT_LE(ulps(y[i], e), 2.0) << n << " " << i;
        ASSERT_LE(ulps(z[i], 0.25 * e), 2.0) << n << " " << i;
      }
    }
  }
}

// The double references use x · sigmoid(2u), identical to 0.5 x (1 + tanh u): in double the tanh
// form itself cancels to 0 below x = -8.
double gelu64(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return x / (1.0 + std::exp(-2.0 * u));
}
double gelu_grad64(double x) {
  const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  const double e = std::exp(-2.0 * u), s = 1.0 / (1.0 + e);
  return s + 2.0 * x * s * s * e * std::sqrt(2.0 / M_PI) * (1 + 3 * 0.044715 * x * x);
}

// GELU over a dense range [-12, 12] (every 2^-12), against the double formula. fp32 rounds the
// argument u (a few ulp); y = x / (1 + exp(-2u)) turns a relative error d of 2u into about
// |2u| d relative in y where x < 0, so the bound is (8 + 4 |2u|) ulp of y (the same for gelu',
// offset by 0.5 to stay away from its zero). For comparison the test prints the error of the
// scalar formula 0.5 x (1 + tanhf(u)), which cancels in 1 + tanh u for x < 0. Below x = -10 GELU
// is under 1e-37 (exp(-2u) is clamped to exp(88) there): an absolute floor of 1e-36.
constexpr double kAbsFloor = 1e-36;
TEST(VectorGelu, ForwardAndBackwardMatchDoubleOverADenseRange) {
  std::vector<float> x;
  for (double v = -12.0; v <= 12.0; v += 0x1p-12) x.push_back(static_cast<float>(v));
  x.push_back(0.0f);
  x.push_back(-0.0f);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<VectorIsa> isas = vector_isas();
  isas.push_back(VectorIsa::kScalar);
  for (VectorIsa isa : isas) {
    const detail::VectorMathFns& f = detail::vector_math_fns(isa);
    std::vector<float> y(x.size()), ones(x.size(), 1.0f), dx(x.size(), 0.5f);
    f.gelu_forward(y.data(), x.data(), n);
    f.gelu_backward(dx.data(), x.data(), ones.data(), n);
    double max_fwd = 0, max_bwd = 0;  // in units of the bound
    double max_fwd_rel = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double u = std::sqrt(2.0 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i]);
      const double bound_ulps = 8.0 + 4.0 * std::fabs(2.0 * u);
      const double want = gelu64(x[i]), want_d = gelu_grad64(x[i]) + 0.5;
      const double err = std::fabs(y[i] - want);
      max_fwd_rel = std::max(max_fwd_rel, err / std::max(std::fabs(want), 1e-30));
      max_fwd = std::max(max_fwd, err / (bound_ulps * 0x1p-24 * std::fabs(want) + kAbsFloor));
      max_bwd =
          std::max(max_bwd, std::fabs(dx[i] - want_d) / std::fabs(want_d) / (bound_ulps * 0x1p-24));
    }
    std::printf(
        "isa %d: gelu max rel error %.3g where |y| > 1e-30 (%.3g of the bound), gelu' %.3g of the "
        "bound\n",
        static_cast<int>(isa), max_fwd_rel, max_fwd, max_bwd);
    if (isa == VectorIsa::kScalar) continue;  // the old formula, printed for comparison only
    EXPECT_LE(max_fwd, 1.0) << static_cast<int>(isa);
    EXPECT_LE(max_bwd, 1.0) << static_cast<int>(isa);
  }
}

}  // namespace
}  // namespace zero::kernels::cpu
