// apply_zero_rules: each stage / offload rule once, with DeepSpeed's demotions as warnings and our
// stricter refusals as errors naming the key.
#include "config/zero_rules.h"

#include <gtest/gtest.h>

namespace zero::config {
namespace {

ZeroPlacement at_stage(int stage) {
  ZeroPlacement p;
  p.stage = stage;
  p.stage_text = std::to_string(stage);
  return p;
}

TEST(ZeroRules, NothingOffloadedIsFineAtEveryStage) {
  for (int stage = 0; stage <= 3; ++stage) {
    const ZeroRules r = apply_zero_rules(at_stage(stage));
    EXPECT_TRUE(r.findings.empty()) << stage;
    EXPECT_TRUE(r.ok());
  }
}

TEST(ZeroRules, OptimizerOffloadAtStageZeroIsAnError) {
  ZeroPlacement p = at_stage(0);
  p.optimizer_offload = OffloadTarget::kCpu;
  const ZeroRules r = apply_zero_rules(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.first_error().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.first_error().message(),
            "zero_optimization.offload_optimizer.device: optimizer offload needs ZeRO stage 1, 2 "
            "or 3 (zero_optimization.stage is 0)");
}

TEST(ZeroRules, BelowStageThreeNvmeOptimizerIsCpuAndParamOffloadIsDropped) {
  for (int stage = 1; stage <= 2; ++stage) {
    ZeroPlacement p = at_stage(stage);
    p.optimizer_offload = OffloadTarget::kNvme;  // no nvme_path: not needed once it is cpu
    p.param_offload = OffloadTarget::kNvme;
    const ZeroRules r = apply_zero_rules(p);
    EXPECT_TRUE(r.ok()) << r.first_error().to_string();
    EXPECT_EQ(r.optimizer_offload, OffloadTarget::kCpu);
    EXPECT_EQ(r.param_offload, OffloadTarget::kNone);
    const std::vector<std::string> w = r.warnings();
    ASSERT_EQ(w.size(), 2u);
    EXPECT_EQ(w[0],
              "zero_optimization.offload_param: ignored below ZeRO stage 3 "
              "(zero_optimization.stage is " +
                  std::to_string(stage) + ")");
    EXPECT_NE(w[1].find("\"nvme\" is treated as \"cpu\""), std::string::npos);
  }
}

TEST(ZeroRules, NvmeNeedsAPathAtStageThreeAndWhenTheStageIsNotKnown) {
  for (std::optional<int> stage : {std::optional<int>(3), std::optional<int>()}) {
    ZeroPlacement p = at_stage(3);
    p.stage = stage;
    p.optimizer_offload = OffloadTarget::kNvme;
    p.param_offload = OffloadTarget::kNvme;
    ZeroRules r = apply_zero_rules(p);
    ASSERT_EQ(r.findings.size(), 2u);
    EXPECT_EQ(r.findings[0].key, "zero_optimization.offload_optimizer.nvme_path");
    EXPECT_EQ(r.findings[1].key, "zero_optimization.offload_param.nvme_path");
    p.optimizer_nvme_path = p.param_nvme_path = true;
    r = apply_zero_rules(p);
    EXPECT_TRUE(r.findings.empty());
    EXPECT_EQ(r.optimizer_offload, OffloadTarget::kNvme);
  }
}

TEST(ZeroRules, RatioBelowOneNeedsStageThreeAndMustBeAFraction) {
  for (int stage = 0; stage <= 3; ++stage) {
    ZeroPlacement p = at_stage(stage);
    p.ratio = 0.5;
    EXPECT_EQ(apply_zero_rules(p).ok(), stage == 3) << stage;
    p.ratio = 1.0;
    EXPECT_TRUE(apply_zero_rules(p).ok()) << stage;
    p.ratio = 1.5;
    const ZeroRules r = apply_zero_rules(p);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.findings[0].key, "zero_optimization.offload_optimizer.ratio");
  }
}

TEST(ZeroRules, LambIsRefusedOnlyWhenShardedAcrossRanks) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (int world : {0, 1, 2}) {
      ZeroPlacement p = at_stage(stage);
      p.lamb = true;
      p.world_size = world;
      const ZeroRules r = apply_zero_rules(p);
      const bool refused = stage >= 1 && world > 1;
      EXPECT_EQ(r.ok(), !refused) << stage << " " << world;
      if (refused) {
        EXPECT_EQ(r.first_error().code(), StatusCode::kUnimplemented);
      }
    }
  }
}

TEST(ZeroRules, AStageOutsideZeroToThreeIsAnError) {
  const ZeroRules r = apply_zero_rules(at_stage(4));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.findings[0].key, "zero_optimization.stage");
}

}  // namespace
}  // namespace zero::config
