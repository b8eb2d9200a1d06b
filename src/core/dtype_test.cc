// DType conversions: exact round-to-nearest-even, specials, and a brute-force check of every 16-bit
// value.
#include "core/dtype.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace zero {
namespace {

TEST(DType, Bf16RoundTripsEveryValue) {
  for (uint32_t b = 0; b < 65536; ++b) {
    bf16 h{static_cast<uint16_t>(b)};
    float f = bf16_to_float(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f))));
      continue;
    }
    EXPECT_EQ(float_to_bf16(f).bits, h.bits) << b;
  }
}

TEST(DType, F16RoundTripsEveryValue) {
  for (uint32_t b = 0; b < 65536; ++b) {
    f16 h{static_cast<uint16_t>(b)};
    float f = f16_to_float(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(f))));
      continue;
    }
    EXPECT_EQ(float_to_f16(f).bits, h.bits) << b;
  }
}

TEST(DType, Bf16TiesToEven) {
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: rounds to the even one (1.0).
  EXPECT_EQ(round_to_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  // 1 + 3*2^-8 is halfway between 1+2^-7 and 1+2^-6: rounds to even (1 + 2^-6).
  EXPECT_EQ(round_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(round_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)),
            1.0f + std::ldexp(1.0f, -7));
}

TEST(DType, F16Specials) {
  EXPECT_EQ(round_to_f16(65504.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(round_to_f16(65520.0f)));
  EXPECT_EQ(round_to_f16(65519.0f), 65504.0f);
  EXPECT_EQ(round_to_f16(std::ldexp(1.0f, -24)), std::ldexp(1.0f, -24));
  EXPECT_EQ(round_to_f16(std::ldexp(1.0f, -25)), 0.0f);  // tie to even (0)
  EXPECT_EQ(round_to_f16(std::ldexp(1.5f, -25)), std::ldexp(1.0f, -24));
  EXPECT_EQ(round_to_f16(1.0f + std::ldexp(1.0f, -11)), 1.0f);  // tie to even
  EXPECT_TRUE(std::signbit(round_to_f16(-0.0f)));
  EXPECT_TRUE(std::isnan(round_to_f16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isinf(round_to_bf16(std::numeric_limits<float>::max())));
}

TEST(DType, Parse) {
  EXPECT_EQ(parse_dtype("fp16"), DType::kF16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::kBF16);
  EXPECT_EQ(parse_dtype("fp32"), DType::kF32);
  EXPECT_FALSE(parse_dtype("int8").has_value());
}

}  // namespace
}  // namespace zero
