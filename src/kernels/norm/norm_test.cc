// Tests for the CPU sum of squares: value against a plain fp64 loop, the non-finite flag
// (inf, -inf, NaN anywhere), empty input, and bit-identical results for 1, 2 and 3 threads.
#include "kernels/norm/norm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/grad_check.h"

namespace zero::kernels::cpu {
namespace {

using testing::random_vector;
using testing::to_float;

class SumSquaresTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(SumSquaresTest, MatchesPlainLoop) {
  const int64_t n = GetParam();
  const auto x = to_float(random_vector(n, 1, -3.0, 3.0));
  double want = 0;
  for (float v : x) want += static_cast<double>(v) * v;
  const SumSquares got = sum_squares(x.data(), n);
  EXPECT_NEAR(got.sum_sq, want, 1e-12 * want);
  EXPECT_FALSE(got.nonfinite);
}

TEST_P(SumSquaresTest, FlagsNonFiniteAnywhere) {
  const int64_t n = GetParam();
  const float specials[] = {std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()};
  for (float special : specials) {
    for (int64_t pos : {int64_t{0}, n / 2, n - 1}) {
      auto x = to_float(random_vector(n, 2));
      x[pos] = special;
      EXPECT_TRUE(sum_squares(x.data(), n).nonfinite) << special << " at " << pos;
    }
  }
  // Large but finite values do not trip the flag (squares are summed in double).
  std::vector<float> big(n, std::numeric_limits<float>::max());
  EXPECT_FALSE(sum_squares(big.data(), n).nonfinite);
}

TEST_P(SumSquaresTest, IdenticalForAnyThreadCount) {
  const int64_t n = GetParam();
  const auto x = to_float(random_vector(n, 3, -100.0, 100.0));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const double one = sum_squares(x.data(), n).sum_sq;
  omp_set_num_threads(2);
  const double two = sum_squares(x.data(), n).sum_sq;
  omp_set_num_threads(3);
  const double three = sum_squares(x.data(), n).sum_sq;
  omp_set_num_threads(saved);
  EXPECT_EQ(one, two);  // exact: same chunks, same order
  EXPECT_EQ(one, three);
}

INSTANTIATE_TEST_SUITE_P(OddSizes, SumSquaresTest,
                         ::testing::Values(1, 7, 13, 16383, 16385, 1000003),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

TEST(SumSquares, EmptyIsZeroAndFinite) {
  const SumSquares got = sum_squares(nullptr, 0);
  EXPECT_EQ(got.sum_sq, 0.0);
  EXPECT_FALSE(got.nonfinite);
}

}  // namespace
}  // namespace zero::kernels::cpu
