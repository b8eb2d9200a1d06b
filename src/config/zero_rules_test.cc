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

// DeepSpeed 0.19's support matrix for bf16 master weights / optimizer states (docs/_pages/
// config-json.md, runtime/config.py, base_optimizer.py): stage 1-3 only; bf16 optimizer states need
// bf16 master weights; fp32 moments with a bf16 master need optimizer offload; and bf16.enabled
// (ours), Adam / AdamW only (ours: the CPU Adam and the fused AdamW have the bf16 state).
TEST(ZeroRules, Bf16StateFollowsDeepSpeedsSupportMatrix) {
  struct Case {
    int stage;
    bool master, states;
    OffloadTarget offload;
    const char* error_key;  // nullptr: accepted
  };
  const char* kMaster = "bf16.bf16_master_weights_and_grads";
  const char* kStates = "bf16.bf16_optimizer_states";
  const Case cases[] = {
      {0, true, true, OffloadTarget::kNone, kMaster},
      {0, true, false, OffloadTarget::kNone, kMaster},
      {0, false, true, OffloadTarget::kNone, kStates},
      {1, false, true, OffloadTarget::kCpu, kStates},   // states without master
      {1, true, false, OffloadTarget::kNone, kMaster},  // fp32 moments need offload
      {1, true, false, OffloadTarget::kCpu, nullptr},
      {2, true, true, OffloadTarget::kNone, nullptr},  // bf16 state on the device / host
      {2, true, true, OffloadTarget::kCpu, nullptr},
      {3, true, true, OffloadTarget::kCpu, nullptr},
      {3, true, true, OffloadTarget::kNvme, nullptr},
      {3, true, false, OffloadTarget::kNvme, nullptr},
  };
  for (const Case& c : cases) {
    ZeroPlacement p = at_stage(c.stage);
    p.bf16 = true;
    p.bf16_master_weights = c.master;
    p.bf16_optimizer_states = c.states;
    p.optimizer_offload = c.offload;
    p.optimizer_nvme_path = true;
    const ZeroRules r = apply_zero_rules(p);
    const std::string what = "stage " + std::to_string(c.stage) + " master " +
                             std::to_string(c.master) + " states " + std::to_string(c.states) +
                             " offload " + std::to_string(static_cast<int>(c.offload));
    if (c.error_key == nullptr) {
      EXPECT_TRUE(r.ok()) << what << ": " << r.first_error().to_string();
    } else {
      ASSERT_FALSE(r.ok()) << what;
      EXPECT_EQ(r.first_error().code(), StatusCode::kInvalidArgument) << what;
      EXPECT_EQ(r.findings.back().key, c.error_key) << what;
    }
  }
}

TEST(ZeroRules, Bf16StateNeedsBf16AndAdam) {
  ZeroPlacement p = at_stage(2);
  p.bf16_master_weights = p.bf16_optimizer_states = true;
  ZeroRules r = apply_zero_rules(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.first_error().message(),
            "bf16.bf16_master_weights_and_grads: needs bf16.enabled: true (the master weights are "
            "the bf16 model's values)");
  p.bf16 = true;
  p.lamb = true;
  r = apply_zero_rules(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.first_error().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(r.findings.back().key, "optimizer.type");
  // Below stage 3 nvme is cpu: bf16 master weights with fp32 moments stay offloaded.
  p = at_stage(1);
  p.bf16 = p.bf16_master_weights = true;
  p.optimizer_offload = OffloadTarget::kNvme;
  r = apply_zero_rules(p);
  EXPECT_TRUE(r.ok()) << r.first_error().to_string();
}

TEST(ZeroRules, AStageOutsideZeroToThreeIsAnError) {
  const ZeroRules r = apply_zero_rules(at_stage(4));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.findings[0].key, "zero_optimization.stage");
}

}  // namespace
}  // namespace zero::config
