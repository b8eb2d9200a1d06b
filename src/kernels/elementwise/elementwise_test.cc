// Tests for the CPU elementwise helpers: add (also in place), accumulate, scale, and the
// OpenMP-chunked dtype casts against the scalar core/dtype.h conversions on odd sizes.
#include "kernels/elementwise/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/grad_check.h"

namespace zero::kernels::cpu {
namespace {

using testing::random_vector;

class ElementwiseTest : public ::testing::TestWithParam<int64_t> {};

template <typename T>
void check_arithmetic(int64_t n) {
  const auto a_d = random_vector(n, 1), b_d = random_vector(n, 2);
  const std::vector<T> a(a_d.begin(), a_d.end()), b(b_d.begin(), b_d.end());
  std::vector<T> out(n);
  add(out.data(), a.data(), b.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]);
  std::vector<T> alias = a;  // out aliases a
  add(alias.data(), alias.data(), b.data(), n);
  EXPECT_EQ(alias, out);

  std::vector<T> acc = a;
  accumulate(acc.data(), b.data(), n);
  accumulate(acc.data(), b.data(), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], (a[i] + b[i]) + b[i]);

  std::vector<T> x = a;
  scale(x.data(), T(-0.375), n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], a[i] * T(-0.375));
}

TEST_P(ElementwiseTest, ArithmeticFloat) { check_arithmetic<float>(GetParam()); }
TEST_P(ElementwiseTest, ArithmeticDouble) { check_arithmetic<double>(GetParam()); }

// Floats over many binades, with specials (inf, NaN, f16 overflow, subnormals, ties) mixed in.
std::vector<float> cast_inputs(int64_t n) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-30, 30);
  std::vector<float> v(n);
  for (auto& x : v) x = std::ldexp(mant(rng), expo(rng));
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            70000.0f,
                            1e-7f,
                            std::numeric_limits<float>::denorm_min(),
                            1.0f + 1.0f / 256.0f,
                            65520.0f};
  for (size_t k = 0; k < std::size(specials) && static_cast<int64_t>(k * 7) < n; ++k) {
    v[k * 7] = specials[k];
  }
  return v;
}

TEST_P(ElementwiseTest, CastRoundTripMatchesScalarConversion) {
  const int64_t n = GetParam();
  const std::vector<float> src = cast_inputs(n);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const size_t bytes = static_cast<size_t>(n) * dtype_bytes(dtype);
    std::vector<char> stored(bytes), stored_serial(bytes);
    cast_from_f32(src.data(), stored.data(), dtype, n);
    convert_from_f32(src.data(), stored_serial.data(), dtype, static_cast<size_t>(n));
    EXPECT_EQ(stored, stored_serial) << dtype_name(dtype);

    std::vector<float> back(n);
    cast_to_f32(stored.data(), dtype, back.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const float want = round_to_dtype(src[i], dtype);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(back[i])) << dtype_name(dtype) << " at " << i;
      } else {
        ASSERT_EQ(float_bits(back[i]), float_bits(want))
            << dtype_name(dtype) << " at " << i << ": " << src[i];
      }
    }
    // A second trip through the 16-bit type is exact.
    std::vector<char> again(bytes);
    cast_from_f32(back.data(), again.data(), dtype, n);
    EXPECT_EQ(again, stored) << dtype_name(dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(OddSizes, ElementwiseTest,
                         ::testing::Values(1, 7, 13, 91, 16383, 16385, 100003),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

}  // namespace
}  // namespace zero::kernels::cpu
