// Tests for the CPU RoPE kernels: frequencies (default and llama3), FD gradients, norm, aliasing.
// Legend: B batch, T time, H heads, D head_dim, D2 = D/2.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/grad_check.h"
#include "kernels/rope/rope.h"

namespace zero::kernels::cpu {
namespace {

using testing::dot;
using testing::max_rel_error;
using testing::numeric_grad;
using testing::random_vector;

TEST(RopeInvFreq, DefaultMatchesClosedForm) {
  for (int64_t D : {2, 8, 64, 128}) {
    for (double theta : {10000.0, 500000.0}) {
      const auto inv = rope_inv_freq(D, theta, RopeScaling{});
      ASSERT_EQ(inv.size(), static_cast<size_t>(D / 2));
      EXPECT_DOUBLE_EQ(inv[0], 1.0);
      for (int64_t i = 0; i < D / 2; ++i) {
        EXPECT_NEAR(inv[i], std::exp(-std::log(theta) * 2.0 * i / D), 1e-15) << D << " " << i;
      }
    }
  }
}

// Expected values from HF `_compute_llama3_parameters` evaluated in float64 with numpy
// (Llama 3.1 settings: D 128, theta 5e5, factor 8, low 1, high 4, original max pos 8192).
TEST(RopeInvFreq, Llama3MatchesHf) {
  RopeScaling s;
  s.type = "llama3";
  s.factor = 8.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 8192;
  const auto inv = rope_inv_freq(128, 500000.0, s);
  const auto base = rope_inv_freq(128, 500000.0, RopeScaling{});
  ASSERT_EQ(inv.size(), 64u);
  struct Expected {
    int i;
    double value;
  };
  const Expected expected[] = {
      {0, 1.0},                      // high frequency: unchanged
      {10, 0.12868737343265052},     // high
      {25, 0.005940730375674967},    // high
      {29, 0.002166570763503359},    // medium band (smoothed)
      {30, 0.0013718935677611381},   // medium
      {32, 0.0005248461609929549},   // medium
      {34, 0.00017850781276799638},  // medium
      {35, 9.556212353964683e-05},   // low frequency: divided by factor
      {50, 4.411534674558404e-06},   // low
      {63, 3.068925988914511e-07},   // low
  };
  for (const auto& e : expected) {
    EXPECT_NEAR(inv[e.i], e.value, 1e-13 * e.value) << "i = " << e.i;
  }
  for (int i = 0; i <= 28; ++i) EXPECT_EQ(inv[i], base[i]) << i;
  for (int i = 35; i < 64; ++i) EXPECT_DOUBLE_EQ(inv[i], base[i] / 8.0) << i;
}

TEST(RopeTables, CosSinOfPositionTimesFrequency) {
  const auto inv = rope_inv_freq(6, 10000.0, RopeScaling{});
  const int64_t T = 5, D2 = 3;
  std::vector<double> cos_TD2(T * D2), sin_TD2(T * D2);
  rope_tables(cos_TD2.data(), sin_TD2.data(), inv, T);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < D2; ++i) {
      EXPECT_DOUBLE_EQ(cos_TD2[t * D2 + i], std::cos(t * inv[i]));
      EXPECT_DOUBLE_EQ(sin_TD2[t * D2 + i], std::sin(t * inv[i]));
    }
  }
  // Position 0 is the identity rotation.
  for (int64_t i = 0; i < D2; ++i) EXPECT_EQ(cos_TD2[i], 1.0);
  for (int64_t i = 0; i < D2; ++i) EXPECT_EQ(sin_TD2[i], 0.0);
}

struct RopeShape {
  int64_t B, T, H, D;
};

class RopeShapes : public ::testing::TestWithParam<RopeShape> {};

TEST_P(RopeShapes, ForwardMatchesRotateHalf) {
  const int64_t B = GetParam().B, T = GetParam().T, H = GetParam().H, D = GetParam().D;
  const int64_t D2 = D / 2, n = B * T * H * D;
  const auto inv = rope_inv_freq(D, 10000.0, RopeScaling{});
  std::vector<double> cos_TD2(T * D2), sin_TD2(T * D2);
  rope_tables(cos_TD2.data(), sin_TD2.data(), inv, T);
  auto x = random_vector(n, 1);
  std::vector<double> y(n);
  rope_forward(y.data(), x.data(), cos_TD2.data(), sin_TD2.data(), B, T, H, D);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t off = ((b * T + t) * H + h) * D;
        for (int64_t j = 0; j < D; ++j) {
          // x * cos + rotate_half(x) * sin, with cos/sin repeated over both halves (HF's emb).
          const int64_t i = j % D2;
          const double rot = j < D2 ? -x[off + j + D2] : x[off + j - D2];
          const double want = x[off + j] * cos_TD2[t * D2 + i] + rot * sin_TD2[t * D2 + i];
          EXPECT_NEAR(y[off + j], want, 1e-15);
        }
      }
    }
  }
}

TEST_P(RopeShapes, RotationPreservesPairNorms) {
  const int64_t B = GetParam().B, T = GetParam().T, H = GetParam().H, D = GetParam().D;
  const int64_t D2 = D / 2, n = B * T * H * D;
  const auto inv = rope_inv_freq(D, 10000.0, RopeScaling{});
  std::vector<double> cos_TD2(T * D2), sin_TD2(T * D2);
  rope_tables(cos_TD2.data(), sin_TD2.data(), inv, T);
  auto x = random_vector(n, 2);
  std::vector<double> y(n);
  rope_forward(y.data(), x.data(), cos_TD2.data(), sin_TD2.data(), B, T, H, D);
  for (int64_t row = 0; row < B * T * H; ++row) {
    for (int64_t i = 0; i < D2; ++i) {
      const double* xr = x.data() + row * D;
      const double* yr = y.data() + row * D;
      EXPECT_NEAR(std::hypot(yr[i], yr[i + D2]), std::hypot(xr[i], xr[i + D2]), 1e-14);
    }
  }
}

TEST_P(RopeShapes, BackwardMatchesFiniteDifferences) {
  const int64_t B = GetParam().B, T = GetParam().T, H = GetParam().H, D = GetParam().D;
  const int64_t D2 = D / 2, n = B * T * H * D;
  const auto inv = rope_inv_freq(D, 10000.0, RopeScaling{});
  std::vector<double> cos_TD2(T * D2), sin_TD2(T * D2);
  rope_tables(cos_TD2.data(), sin_TD2.data(), inv, T);
  auto x = random_vector(n, 3);
  const auto w = random_vector(n, 4);
  std::vector<double> y(n);
  auto loss = [&] {
    rope_forward(y.data(), x.data(), cos_TD2.data(), sin_TD2.data(), B, T, H, D);
    return dot(w, y.data(), n);
  };
  const auto want = numeric_grad(x, loss);
  std::vector<double> dx(n, 123.0);  // garbage: backward overwrites
  rope_backward(dx.data(), w.data(), cos_TD2.data(), sin_TD2.data(), B, T, H, D);
  EXPECT_LT(max_rel_error(dx, want), 1e-8);
}

TEST_P(RopeShapes, OutputMayAliasInput) {
  const int64_t B = GetParam().B, T = GetParam().T, H = GetParam().H, D = GetParam().D;
  const int64_t D2 = D / 2, n = B * T * H * D;
  const auto inv = rope_inv_freq(D, 10000.0, RopeScaling{});
  std::vector<float> cos_TD2(T * D2), sin_TD2(T * D2);
  rope_tables(cos_TD2.data(), sin_TD2.data(), inv, T);
  const auto x = testing::to_float(random_vector(n, 5));
  std::vector<float> y(n), inplace = x;
  rope_forward(y.data(), x.data(), cos_TD2.data(), sin_TD2.data(), B, T, H, D);
  rope_forward(inplace.data(), inplace.data(), cos_TD2.data(), sin_TD2.data(), B, T, H, D);
  EXPECT_EQ(inplace, y);
  std::vector<float> dx(n), dinplace = x;
  rope_backward(dx.data(), x.data(), cos_TD2.data(), sin_TD2.data(), B, T, H, D);
  rope_backward(dinplace.data(), dinplace.data(), cos_TD2.data(), sin_TD2.data(), B, T, H, D);
  EXPECT_EQ(dinplace, dx);
  // Backward undoes forward (the rotation is orthogonal).
  std::vector<float> back(n);
  rope_backward(back.data(), y.data(), cos_TD2.data(), sin_TD2.data(), B, T, H, D);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(back[i], x[i], 1e-6f);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RopeShapes,
                         ::testing::Values(RopeShape{1, 1, 1, 2}, RopeShape{1, 7, 3, 8},
                                           RopeShape{2, 5, 2, 6}, RopeShape{3, 4, 1, 16}));

}  // namespace
}  // namespace zero::kernels::cpu
