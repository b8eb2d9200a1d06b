// Loss scaler sequences (DeepSpeed DynamicLossScaler.update_scale), fp16-block defaults, static
// and bf16 scaling, the min-scale error and the OVERFLOW! log line.
#include "optim/loss_scaler.h"

#include <cmath>

#include <gtest/gtest.h>

namespace zero::optim {
namespace {

using nlohmann::json;

LossScalerConfig dynamic(double scale, int64_t window, int64_t hysteresis, bool consecutive,
                         double min_scale = 1.0) {
  LossScalerConfig c;
  c.mode = LossScaleMode::kDynamic;
  c.initial_scale = scale;
  c.scale_window = window;
  c.hysteresis = hysteresis;
  c.consecutive_hysteresis = consecutive;
  c.min_scale = min_scale;
  return c;
}

// Feeds a pattern ('o' overflow, '.' clean) and returns the scale after each step.
std::vector<double> run(LossScaler& s, std::string_view pattern) {
  std::vector<double> scales;
  for (char c : pattern) {
    auto u = s.update(c == 'o');
    EXPECT_TRUE(u.ok()) << u.status().to_string();
    scales.push_back(s.scale());
  }
  return scales;
}

TEST(LossScaler, MinimalFp16BlockUsesScalerDefaults) {
  auto c = loss_scaler_config_from_fp16_json({{"enabled", true}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->mode, LossScaleMode::kDynamic);
  EXPECT_EQ(c->initial_scale, std::ldexp(1.0, 32));
  EXPECT_EQ(c->scale_window, 1000);
  EXPECT_EQ(c->hysteresis, 1);
  EXPECT_EQ(c->min_scale, 1.0);
  EXPECT_FALSE(c->consecutive_hysteresis);
}

TEST(LossScaler, AnyDynamicKeySwitchesToDocumentedDefaults) {
  auto c = loss_scaler_config_from_fp16_json({{"enabled", true}, {"loss_scale_window", 500}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->initial_scale, 65536.0);
  EXPECT_EQ(c->scale_window, 500);
  EXPECT_EQ(c->hysteresis, 2);
  auto full = loss_scaler_config_from_fp16_json({{"enabled", true},
                                                 {"loss_scale", 0},
                                                 {"initial_scale_power", 12},
                                                 {"hysteresis", 3},
                                                 {"consecutive_hysteresis", true},
                                                 {"min_loss_scale", 0.25}});
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->initial_scale, 4096.0);
  EXPECT_EQ(full->hysteresis, 3);
  EXPECT_TRUE(full->consecutive_hysteresis);
  EXPECT_EQ(full->min_scale, 0.25);
}

TEST(LossScaler, StaticAndDisabled) {
  auto st = loss_scaler_config_from_fp16_json({{"enabled", true}, {"loss_scale", 128}});
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->mode, LossScaleMode::kStatic);
  LossScaler s(*st);
  EXPECT_EQ(run(s, "o.o..o"), std::vector<double>(6, 128.0));
  auto off = loss_scaler_config_from_fp16_json({{"enabled", false}, {"loss_scale", 128}});
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->mode, LossScaleMode::kNone);
  LossScaler none(*off);  // bf16 / fp32
  EXPECT_EQ(none.scale(), 1.0);
  EXPECT_EQ(run(none, "oo.."), std::vector<double>(4, 1.0));
  EXPECT_FALSE(loss_scaler_config_from_fp16_json({{"enabled", true}, {"hysteresis", 0}}).ok());
  EXPECT_FALSE(
      loss_scaler_config_from_fp16_json({{"enabled", true}, {"loss_scale_window", 0}}).ok());
}

TEST(LossScaler, HalvesImmediatelyWithoutHysteresis) {
  LossScaler s(dynamic(1024, 1000, 1, false));
  EXPECT_EQ(run(s, "ooo"), (std::vector<double>{512, 256, 128}));
}

TEST(LossScaler, HysteresisDelaysTheHalving) {
  // hysteresis 2: first overflow spends hysteresis, the second halves; without consecutive
  // hysteresis a clean step in between does not refill it.
  LossScaler s(dynamic(1024, 1000, 2, false));
  EXPECT_EQ(run(s, "o.o"), (std::vector<double>{1024, 1024, 512}));
  EXPECT_EQ(s.hysteresis(), 1);
  EXPECT_EQ(run(s, "o"), (std::vector<double>{256}));
}

TEST(LossScaler, ConsecutiveHysteresisRefillsOnCleanSteps) {
  LossScaler s(dynamic(1024, 1000, 2, true));
  EXPECT_EQ(run(s, "o.o.o."), std::vector<double>(6, 1024.0));
  EXPECT_EQ(run(s, "oo"), (std::vector<double>{1024, 512}));
}

TEST(LossScaler, GrowsAfterWindowCleanSteps) {
  LossScaler s(dynamic(16, 3, 2, false));
  // Fresh: it=0, last_overflow=-1, so the 3rd clean step (it=2) grows.
  EXPECT_EQ(run(s, "..."), (std::vector<double>{16, 16, 32}));
  EXPECT_EQ(run(s, "..."), (std::vector<double>{32, 32, 64}));
  // Overflow at it=6 (spends hysteresis), then growth when it - 6 == 3 (it=9), which refills it.
  EXPECT_EQ(run(s, "o..."), (std::vector<double>{64, 64, 64, 128}));
  EXPECT_EQ(s.hysteresis(), 2);
}

TEST(LossScaler, ErrorAtMinimumScale) {
  LossScaler s(dynamic(4, 1000, 1, false, /*min_scale=*/2));
  EXPECT_EQ(run(s, "o"), (std::vector<double>{2}));
  auto u = s.update(true);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(u.status().message().find(kMinScaleErrorMessage), std::string::npos);
}

TEST(LossScaler, ClampsToMinimumBeforeErroring) {
  LossScaler s(dynamic(3, 1000, 1, false, /*min_scale=*/2));
  EXPECT_EQ(run(s, "o"), (std::vector<double>{2}));  // max(1.5, 2)
  EXPECT_FALSE(s.update(true).ok());
}

TEST(LossScaler, OverflowLogLines) {
  LossScaler s(dynamic(65536, 1000, 2, false));
  auto first = s.update(true);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(overflow_log_line(0, LossScaleMode::kDynamic, *first),
            "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, but "
            "hysteresis is 2. Reducing hysteresis to 1");
  auto second = s.update(true);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(overflow_log_line(0, LossScaleMode::kDynamic, *second),
            "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing "
            "to 32768");
  EXPECT_EQ(overflow_log_line(0, LossScaleMode::kNone, *second),
            "[deepspeed] OVERFLOW! Rank 0 Skipping step.");
}

TEST(LossScaler, StateRoundTrips) {
  LossScaler s(dynamic(1024, 4, 2, false));
  run(s, "o..o.");
  LossScaler restored(dynamic(1024, 4, 2, false));
  ASSERT_TRUE(restored.restore(s.state()).ok());
  EXPECT_EQ(restored.state(), s.state());
  EXPECT_EQ(run(restored, "...o"), run(s, "...o"));
  EXPECT_FALSE(restored.restore(json{{"cur_scale", 1.0}}).ok());
}

}  // namespace
}  // namespace zero::optim
