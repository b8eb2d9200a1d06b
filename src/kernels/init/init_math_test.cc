// init_math.h's log and cos (written for equal bits on the host and a GPU) against libm, and its
// normals' first moments: a replacement for std::log / std::cos must stay as accurate as they are
// for what the initialisation draws (u in (0, 1] on the 2^-53 grid).
#include "kernels/init/init_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace zero::kernels::init {
namespace {

// |a - b| in units of b's last place.
double ulps(double a, double b) {
  return std::fabs(a - b) / (std::nextafter(std::fabs(b), INFINITY) - std::fabs(b));
}

TEST(InitMath, LogWithinFourUlpsOverTheUniformGrid) {
  double worst = 0;
  uint64_t x = 1;
  for (int i = 0; i < 200000; ++i) {
    x = splitmix64(x);
    const double u = to_unit(x);
    worst = std::max(worst, ulps(det_log(u), std::log(u)));
  }
  // The ends of the grid: the smallest uniform, 1, and just below 1 (log near 0).
  for (double u : {0x1.0p-53, 0x1.0p-30, 0.5, 0.70710678118654746, 0.70710678118654757,
                   1.0 - 0x1.0p-53, 1.0 - 0x1.0p-20}) {
    worst = std::max(worst, ulps(det_log(u), std::log(u)));
  }
  EXPECT_EQ(det_log(1.0), 0.0);
  EXPECT_LE(worst, 4.0);
  std::printf("det_log: worst %.2f ulp\n", worst);
}

TEST(InitMath, CosWithinTwoToTheMinusFiftyOfLibm) {
  double worst = 0;
  uint64_t x = 2;
  for (int i = 0; i < 200000; ++i) {
    x = splitmix64(x);
    const double t = to_unit(x);
    worst = std::max(worst, std::fabs(det_cos_turns(t) - std::cos(2.0 * M_PI * t)));
  }
  for (double t : {0.0, 0.125, 0.25, 0.375, 0.5, 0.75, 1.0}) {
    worst = std::max(worst, std::fabs(det_cos_turns(t) - std::cos(2.0 * M_PI * t)));
  }
  EXPECT_EQ(det_cos_turns(1.0), 1.0);
  EXPECT_EQ(det_cos_turns(0.5), -1.0);
  EXPECT_LE(worst, 0x1.0p-50);
  std::printf("det_cos_turns: worst |error| %.3g\n", worst);
}

TEST(InitMath, NormalsHaveUnitVarianceAndZeroMean) {
  constexpr int kCount = 400000;
  double sum = 0, sum2 = 0, sum4 = 0;
  for (int i = 0; i < kCount; ++i) {
    const double z = normal_at(0x1234, i);
    sum += z;
    sum2 += z * z;
    sum4 += z * z * z * z;
  }
  const double mean = sum / kCount, var = sum2 / kCount - mean * mean;
  // Standard errors: mean 1/sqrt(n) = 0.0016, variance sqrt(2/n) = 0.0022, fourth moment ~0.015.
  EXPECT_NEAR(mean, 0.0, 0.008);
  EXPECT_NEAR(var, 1.0, 0.011);
  EXPECT_NEAR(sum4 / kCount, 3.0, 0.08);
}

}  // namespace
}  // namespace zero::kernels::init
