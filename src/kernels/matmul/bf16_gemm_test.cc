// Tests for the bf16 GEMM (oneDNN, AVX512-BF16) against an fp64 loop over the bf16-rounded inputs:
// every transposition variant, odd shapes (1, primes, k past oneDNN's blocking), accumulation into
// C, and the dense layer's three GEMMs through matmul_forward / matmul_backward. Skipped on CPUs
// without AVX512-BF16 (the model keeps fp32 GEMMs there).
#include "kernels/matmul/bf16_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/matmul/matmul.h"

namespace zero::kernels::cpu {
namespace {

struct GemmShape {
  int64_t m, n, k;
};

std::vector<float> random_floats(int64_t count, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = dist(gen);
  return v;
}

// Element (r, c) of op(x), x stored row-major with `cols` columns, transposed when `trans`.
float at(const std::vector<float>& x, bool trans, int64_t r, int64_t c, int64_t ld) {
  return trans ? x[c * ld + r] : x[r * ld + c];
}

// The bound on an fp32 sum of k exact products plus c0: gamma_(k+1) · (Σ|a·b| + |c0|), with
// gamma_j = j·u / (1 − j·u), u = 2^-24 (Higham, Accuracy and Stability, §3.1), any order.
double fp32_sum_bound(int64_t k, double abs_sum) {
  const double u = 0x1p-24, j = static_cast<double>(k + 1);
  return j * u / (1.0 - j * u) * abs_sum;
}

class Bf16GemmTest : public ::testing::TestWithParam<GemmShape> {
 protected:
  void SetUp() override {
    if (!Bf16Gemm::cpu_supported()) GTEST_SKIP() << "CPU without AVX512-BF16";
  }
};

TEST_P(Bf16GemmTest, MatchesFp64LoopOverRoundedInputsForEveryTransposition) {
  const GemmShape s = GetParam();
  Bf16Gemm gemm;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int64_t lda = ta ? s.m : s.k, ldb = tb ? s.k : s.n;
      const auto a = random_floats(s.m * s.k, 1), b = random_floats(s.k * s.n, 2);
      const auto c0 = random_floats(s.m * s.n, 3);
      std::vector<float> c = c0;
      gemm.gemm(ta, tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, c.data(), s.n);
      for (int64_t i = 0; i < s.m; ++i) {
        for (int64_t j = 0; j < s.n; ++j) {
          double want = c0[i * s.n + j], abs_sum = std::fabs(want);
          for (int64_t p = 0; p < s.k; ++p) {
            const double prod = static_cast<double>(round_to_bf16(at(a, ta, i, p, lda))) *
                                static_cast<double>(round_to_bf16(at(b, tb, p, j, ldb)));
            want += prod;
            abs_sum += std::fabs(prod);
          }
          ASSERT_LE(std::fabs(c[i * s.n + j] - want), fp32_sum_bound(s.k, abs_sum) + 1e-30)
              << "ta " << ta << " tb " << tb << " at (" << i << ", " << j << ")";
        }
      }
    }
  }
}

// The dense layer's GEMMs (forward NT, dinp NN, dweight TN) through the bf16 path, against the
// fp64 dense layer run on the bf16-rounded inputs.
TEST_P(Bf16GemmTest, DenseLayerMatchesFp64OnRoundedInputs) {
  const GemmShape s = GetParam();
  const int64_t N = s.m, C = s.k, OC = s.n;
  Bf16Gemm gemm;
  const auto inp = random_floats(N * C, 4), weight = random_floats(OC * C, 5),
             bias = random_floats(OC, 6), dout = random_floats(N * OC, 7);
  auto rounded = [](const std::vector<float>& x) {
    std::vector<double> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = round_to_bf16(x[i]);
    return r;
  };
  std::vector<double> inp64 = rounded(inp), weight64 = rounded(weight), dout64 = rounded(dout);
  std::vector<double> bias64(bias.begin(), bias.end());
  std::vector<double> out64(N * OC), dinp64(N * C, 0.0), dweight64(OC * C, 0.0);
  matmul_forward(out64.data(), inp64.data(), weight64.data(), bias64.data(), N, C, OC);
  matmul_backward(dinp64.data(), dweight64.data(), static_cast<double*>(nullptr), dout64.data(),
                  inp64.data(), weight64.data(), N, C, OC);

  std::vector<float> out(N * OC), dinp(N * C, 0.0f), dweight(OC * C, 0.0f);
  matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), N, C, OC, &gemm);
  matmul_backward(dinp.data(), dweight.data(), static_cast<float*>(nullptr), dout.data(),
                  inp.data(), weight.data(), N, C, OC, &gemm);
  // Inputs of unit variance: Σ|a·b| over K terms is about K·(2/π); a loose 2·K·u·K bound per
  // element keeps the check independent of oneDNN's summation order.
  auto check = [](const std::vector<float>& got, const std::vector<double>& want, int64_t K,
                  const char* what) {
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_LE(std::fabs(got[i] - want[i]), fp32_sum_bound(K, 4.0 * static_cast<double>(K) + 8.0))
          << what << " element " << i;
    }
  };
  check(out, out64, C, "out");
  check(dinp, dinp64, OC, "dinp");
  check(dweight, dweight64, N, "dweight");
}

INSTANTIATE_TEST_SUITE_P(OddShapes, Bf16GemmTest,
                         ::testing::Values(GemmShape{1, 1, 1}, GemmShape{1, 7, 3},
                                           GemmShape{5, 1, 11}, GemmShape{13, 17, 29},
                                           GemmShape{64, 48, 32}, GemmShape{37, 53, 1031},
                                           GemmShape{128, 96, 256}));

TEST(Bf16GemmCache, ShapesInterleavedGiveTheSameResultsAsFreshInstances) {
  if (!Bf16Gemm::cpu_supported()) GTEST_SKIP() << "CPU without AVX512-BF16";
  Bf16Gemm shared;
  const GemmShape shapes[] = {{9, 10, 11}, {3, 4, 5}, {9, 10, 11}, {3, 4, 5}};
  for (const GemmShape& s : shapes) {
    const auto a = random_floats(s.m * s.k, 8), b = random_floats(s.n * s.k, 9);
    std::vector<float> c1(s.m * s.n, 0.0f), c2(s.m * s.n, 0.0f);
    shared.gemm(false, true, s.m, s.n, s.k, a.data(), s.k, b.data(), s.k, c1.data(), s.n);
    Bf16Gemm fresh;
    fresh.gemm(false, true, s.m, s.n, s.k, a.data(), s.k, b.data(), s.k, c2.data(), s.n);
    EXPECT_EQ(c1, c2);
  }
}

// The rounding of the GEMM inputs is core/dtype.h's float_to_bf16, bit for bit: ties, the
// largest values (overflow to inf), denormals (kept, unlike VCVTNEPS2BF16), NaN, infinities, over
// a length that is not a multiple of the 16-lane vector.
// An operand inside a lent bf16 source is read from it, not rounded again: the same bits in, the
// same result out. One that only starts inside the source (or is strided) is rounded as before.
TEST(Bf16GemmSource, LentBf16ValuesGiveTheResultOfRoundingTheirWidenedCopy) {
  if (!Bf16Gemm::cpu_supported()) GTEST_SKIP() << "CPU without AVX512-BF16";
  const int64_t m = 5, n = 7, k = 13;
  std::vector<float> a(static_cast<size_t>(m * k)), widened(static_cast<size_t>(n * k + 11));
  std::vector<uint16_t> bits(widened.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.37f * static_cast<float>(i));
  for (size_t i = 0; i < widened.size(); ++i) {
    bits[i] = float_to_bf16(std::cos(0.53f * static_cast<float>(i))).bits;
    widened[i] = bf16_to_float(bf16{bits[i]});
  }
  for (int64_t offset : {int64_t{0}, int64_t{11}}) {
    Bf16Gemm plain, lent;
    lent.set_bf16_source(1, widened.data(), bits.data(), static_cast<int64_t>(widened.size()));
    std::vector<float> want(static_cast<size_t>(m * n), 0.0f), got = want;
    plain.gemm(false, true, m, n, k, a.data(), k, widened.data() + offset, k, want.data(), n);
    lent.gemm(false, true, m, n, k, a.data(), k, widened.data() + offset, k, got.data(), n);
    EXPECT_EQ(got, want) << "offset " << offset;
    // A strided operand inside the source is rounded as before (the source is dense).
    std::vector<float> strided(static_cast<size_t>(m * n), 0.0f), strided_want = strided;
    plain.gemm(false, false, m, 3, 4, a.data(), k, widened.data() + offset, 5, strided_want.data(),
               n);
    lent.gemm(false, false, m, 3, 4, a.data(), k, widened.data() + offset, 5, strided.data(), n);
    EXPECT_EQ(strided, strided_want) << "strided operand, offset " << offset;
  }
  // NaN bits lent where they must not be read: a cleared slot, and an operand running one element
  // past the source's end. Both are rounded from the fp32 values.
  Bf16Gemm plain, cleared, short_source;
  std::vector<uint16_t> poison(bits.size(), 0x7fc0);
  cleared.set_bf16_source(0, widened.data(), poison.data(), static_cast<int64_t>(widened.size()));
  cleared.set_bf16_source(0, nullptr, nullptr, 0);
  short_source.set_bf16_source(0, widened.data(), poison.data(), n * k + 10);
  std::vector<float> want(static_cast<size_t>(m * n), 0.0f), got = want, got_short = want;
  plain.gemm(false, true, m, n, k, a.data(), k, widened.data() + 11, k, want.data(), n);
  cleared.gemm(false, true, m, n, k, a.data(), k, widened.data() + 11, k, got.data(), n);
  short_source.gemm(false, true, m, n, k, a.data(), k, widened.data() + 11, k, got_short.data(), n);
  EXPECT_EQ(got, want);
  EXPECT_EQ(got_short, want);
  // Inside a lent source the lent bits are what is read (here NaN): nothing is rounded again.
  Bf16Gemm poisoned;
  poisoned.set_bf16_source(1, widened.data(), poison.data(), static_cast<int64_t>(poison.size()));
  std::vector<float> nan_out(static_cast<size_t>(m * n), 0.0f);
  poisoned.gemm(false, true, m, n, k, a.data(), k, widened.data() + 11, k, nan_out.data(), n);
  EXPECT_TRUE(std::isnan(nan_out[0]));
}

TEST(RoundToBf16Bits, MatchesFloatToBf16Bitwise) {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f + 0x1p-8f,
                          1.0f + 0x1.8p-7f,
                          -(1.0f + 0x1p-8f),
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          0x1.fffp-127f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::signaling_NaN()};
  const auto r = random_floats(10007, 10);
  v.insert(v.end(), r.begin(), r.end());
  std::vector<uint16_t> bits(v.size());
  round_to_bf16_bits(v.data(), bits.data(), static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(bits[i], float_to_bf16(v[i]).bits) << i;
}

}  // namespace
}  // namespace zero::kernels::cpu
