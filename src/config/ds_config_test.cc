// Tests for the typed DsConfig view.
#include "config/ds_config.h"

#include <gtest/gtest.h>

#include "config/loader.h"

namespace zero::config {
namespace {

EffectiveConfig build(std::string_view text) {
  auto loaded = load_ds_config_text(text, "t.json");
  EXPECT_TRUE(loaded.ok());
  return *build_effective_config(loaded->json);
}

TEST(DsConfig, StringBooleansAreReadAsBooleans) {
  // Before: make_ds_config failed with "fp16.enabled: unexpected value \"false\"".
  auto c = make_ds_config(build(R"({"fp16": {"enabled": "false"}, "bf16": {"enabled": "true"},
      "wall_clock_breakdown": "yes"})"));
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_FALSE(c->fp16.enabled.value);
  EXPECT_TRUE(c->bf16_enabled.value);
  EXPECT_TRUE(c->wall_clock_breakdown.value);
}

TEST(DsConfig, TypedFieldsAndOrigins) {
  EffectiveConfig e = build(R"({"train_micro_batch_size_per_gpu": 2, "gradient_clipping": "auto",
      "bf16": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"},
      "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme",
      "nvme_path": "/nvme"}, "stage3_max_live_parameters": 1e9},
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
      "checkpoint": {"tag_validation": "fail"}})");
  auto c = make_ds_config(e);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->train_micro_batch_size_per_gpu.value, 2);
  EXPECT_FALSE(c->train_batch_size.value.has_value());
  EXPECT_TRUE(c->gradient_clipping.is_auto());
  EXPECT_TRUE(c->bf16_enabled.value);
  EXPECT_EQ(c->grad_accum_dtype.value, DType::kF32);
  EXPECT_FALSE(c->communication_data_type.value.has_value());
  EXPECT_EQ(c->zero.stage.value, 3);
  EXPECT_TRUE(c->zero.overlap_comm.value);
  EXPECT_EQ(c->zero.max_live_parameters.value, 1000000000);
  EXPECT_EQ(c->zero.offload_optimizer.device.value, OffloadDevice::kNvme);
  EXPECT_EQ(c->zero.offload_optimizer.nvme_path.value, "/nvme");
  EXPECT_EQ(c->zero.offload_optimizer.buffer_count.value, 4);
  EXPECT_EQ(c->zero.offload_param.buffer_count.value, 5);
  EXPECT_EQ(c->optimizer.type.value, "AdamW");
  EXPECT_EQ(c->optimizer.params["lr"], 1e-4);
  EXPECT_EQ(c->checkpoint.tag_validation.value, TagValidation::kFail);
  EXPECT_EQ(c->aio.block_size.value, 1048576);
  EXPECT_EQ(unresolved_auto_paths(e), std::vector<std::string>{"gradient_clipping"});
}

TEST(DsConfig, ResolvedAutoIsTyped) {
  EffectiveConfig e = build(R"({"gradient_clipping": "auto"})");
  ASSERT_TRUE(resolve_from_flag(e, "gradient_clipping", 1.0, "--max_grad_norm").ok());
  auto c = make_ds_config(e);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->gradient_clipping.value, 1.0);
  EXPECT_EQ(c->gradient_clipping.origin, Origin::kFlag);
  EXPECT_TRUE(unresolved_auto_paths(e).empty());
}

}  // namespace
}  // namespace zero::config
