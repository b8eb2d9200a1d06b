// Clip divisor and combined multiplier (DeepSpeed unscale_and_clip_grads), and the decay rule.
#include "optim/grad_clip.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "optim/weight_decay.h"

namespace zero::optim {
namespace {

TEST(GradClip, NoClippingBelowThreshold) {
  const GradScaling s = grad_scaling(/*scaled=*/0.5 * 1024, /*loss_scale=*/1024, /*clip=*/1.0);
  EXPECT_TRUE(s.finite);
  EXPECT_DOUBLE_EQ(s.grad_norm, 0.5);
  EXPECT_EQ(s.clip_divisor, 1.0);
  EXPECT_EQ(s.grad_multiplier, 1.0f / 1024.0f);
}

TEST(GradClip, ClipsOnUnscaledNorm) {
  // Unscaled norm 4, max 1: divisor (4 + 1e-6) / 1, so clipped norm = 4 / (4 + 1e-6) < 1.
  const GradScaling s = grad_scaling(4.0 * 65536, 65536, 1.0);
  EXPECT_DOUBLE_EQ(s.grad_norm, 4.0);
  EXPECT_DOUBLE_EQ(s.clip_divisor, 4.0 + 1e-6);
  EXPECT_FLOAT_EQ(s.grad_multiplier, static_cast<float>(1.0 / (65536 * (4.0 + 1e-6))));
  // Same as torch's max_norm / (norm + 1e-6).
  EXPECT_NEAR(1.0 / s.clip_divisor, 1.0 / (4.0 + 1e-6), 1e-15);
}

TEST(GradClip, JustAboveThresholdStillUnclipped) {
  // norm + 1e-6 <= max_norm => divisor clamps to 1.
  EXPECT_EQ(grad_scaling(1.0 - 2e-6, 1.0, 1.0).clip_divisor, 1.0);
  EXPECT_GT(grad_scaling(1.0, 1.0, 1.0).clip_divisor, 1.0);
}

TEST(GradClip, DisabledWhenZero) {
  const GradScaling s = grad_scaling(1e6, 2.0, 0.0);
  EXPECT_EQ(s.clip_divisor, 1.0);
  EXPECT_EQ(s.grad_multiplier, 0.5f);
}

TEST(GradClip, NonFiniteNormUsesSentinel) {
  const GradScaling s = grad_scaling(std::numeric_limits<double>::infinity(), 8.0, 1.0);
  EXPECT_FALSE(s.finite);
  EXPECT_EQ(s.grad_norm, -1.0);
  EXPECT_EQ(s.clip_divisor, 1.0);
  EXPECT_FALSE(grad_scaling(std::nan(""), 1.0, 1.0).finite);
}

TEST(WeightDecay, MatricesAndEmbeddingsOnly) {
  EXPECT_FALSE(decays(0));
  EXPECT_FALSE(decays(1));  // biases, LayerNorm / RMSNorm weights
  EXPECT_TRUE(decays(2));   // linear weights, embeddings
  EXPECT_TRUE(decays(4));
  EXPECT_EQ(group_weight_decay(1, 0.1), 0.0);
  EXPECT_EQ(group_weight_decay(2, 0.1), 0.1);
}

}  // namespace
}  // namespace zero::optim
