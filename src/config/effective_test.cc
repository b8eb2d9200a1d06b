// Tests for the effective-config builder, renderer and flag resolution.
#include "config/effective.h"

#include <gtest/gtest.h>

#include "config/loader.h"

namespace zero::config {
namespace {

EffectiveConfig build(std::string_view text, std::optional<int64_t> world = std::nullopt) {
  auto loaded = load_ds_config_text(text, "t.json");
  EXPECT_TRUE(loaded.ok());
  auto eff = build_effective_config(loaded->json, world);
  EXPECT_TRUE(eff.ok()) << eff.status().message();
  return *eff;
}

TEST(Effective, DefaultsFollowTheCode) {
  EffectiveConfig e = build("{}");
  EXPECT_EQ(e.json["gradient_clipping"], 0.0);
  EXPECT_TRUE(e.json["steps_per_print"].is_null());
  EXPECT_EQ(e.json["zero_optimization"]["stage3_prefetch_bucket_size"], 50000000);
  EXPECT_EQ(e.json["zero_optimization"]["overlap_comm"], false);
  EXPECT_EQ(e.json["zero_optimization"]["offload_optimizer"]["device"], "none");
  EXPECT_EQ(e.origin("zero_optimization.stage"), Origin::kDefault);
}

// "enabled": "false" (the HF guide's fp32 example) is the boolean false in the effective config,
// so `zero config show` prints false and the trainer reads false; also for a document that did
// not come through the loader.
TEST(Effective, StringBooleansBecomeBooleans) {
  EffectiveConfig e = build(R"({"fp16": {"enabled": "false"}, "bf16": {"enabled": "TRUE"}})");
  EXPECT_EQ(e.json["fp16"]["enabled"], false);
  EXPECT_EQ(e.json["bf16"]["enabled"], true);
  EXPECT_EQ(e.origin("fp16.enabled"), Origin::kFile);
  EXPECT_NE(render_effective_config(e).find("\"enabled\": false,"), std::string::npos);
  auto raw = build_effective_config(
      Json{{"zero_optimization", {{"offload_optimizer", {{"pin_memory", "on"}}}}}});
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(raw->json["zero_optimization"]["offload_optimizer"]["pin_memory"], true);
}

TEST(Effective, OverlapCommDefaultsTrueAtStage3) {
  EXPECT_EQ(
      build(R"({"zero_optimization": {"stage": 3}})").json["zero_optimization"]["overlap_comm"],
      true);
}

TEST(Effective, AliasesAndDeprecatedKeysAreCanonical) {
  EffectiveConfig e = build(R"({"zero_optimization": {"stage": 3, "max_live_parameters": 7,
      "cpu_offload": true, "stage3_gather_fp16_weights_on_model_save": true},
      "aio": {"thread_count": 4}, "bfloat16": {"enabled": true}})");
  const Json& z = e.json["zero_optimization"];
  EXPECT_EQ(z["stage3_max_live_parameters"], 7);
  EXPECT_FALSE(z.contains("max_live_parameters"));
  EXPECT_EQ(z["offload_optimizer"]["device"], "cpu");
  EXPECT_EQ(e.origin("zero_optimization.offload_optimizer.device"), Origin::kDerived);
  EXPECT_EQ(z["stage3_gather_16bit_weights_on_model_save"], true);
  EXPECT_FALSE(z.contains("cpu_offload"));
  EXPECT_EQ(e.json["aio"]["intra_op_parallelism"], 4);
  EXPECT_EQ(e.json["bf16"]["enabled"], true);
  EXPECT_FALSE(e.json.contains("bfloat16"));
}

TEST(Effective, IntegersWrittenWithExponentsBecomeIntegers) {
  EffectiveConfig e = build(R"({"zero_optimization": {"reduce_bucket_size": 2e8}})");
  EXPECT_TRUE(e.json["zero_optimization"]["reduce_bucket_size"].is_number_integer());
  EXPECT_EQ(e.origin("zero_optimization.reduce_bucket_size"), Origin::kFile);
}

TEST(Effective, Fp16ScalerDefaultsDependOnTheBlock) {
  EffectiveConfig bare = build(R"({"fp16": {"enabled": true}})");
  EXPECT_EQ(bare.json["fp16"]["initial_scale_power"], 32);
  EXPECT_EQ(bare.json["fp16"]["hysteresis"], 1);
  EffectiveConfig full = build(R"({"fp16": {"enabled": true, "loss_scale_window": 500}})");
  EXPECT_EQ(full.json["fp16"]["initial_scale_power"], 16);
  EXPECT_EQ(full.json["fp16"]["hysteresis"], 2);
}

TEST(Effective, LegacyZeroBool) {
  EffectiveConfig e = build(R"({"zero_optimization": true, "allgather_size": 300})");
  EXPECT_EQ(e.json["zero_optimization"]["stage"], 1);
  EXPECT_EQ(e.json["zero_optimization"]["allgather_bucket_size"], 300);
}

TEST(Effective, OptimizerParamsGetTypeDefaults) {
  EffectiveConfig e = build(R"({"optimizer": {"type": "adamw", "params": {"lr": "auto"}}})");
  EXPECT_EQ(e.json["optimizer"]["params"]["lr"], "auto");
  EXPECT_EQ(e.origin("optimizer.params.lr"), Origin::kAuto);
  EXPECT_EQ(e.json["optimizer"]["params"]["eps"], 1e-8);
}

TEST(Effective, BatchTriadDerivedWithWorldSize) {
  EffectiveConfig e = build(R"({"train_batch_size": 32, "gradient_accumulation_steps": 2})", 4);
  EXPECT_EQ(e.json["train_micro_batch_size_per_gpu"], 4);
  EXPECT_EQ(e.origin("train_micro_batch_size_per_gpu"), Origin::kDerived);
}

TEST(Effective, RenderMarksEveryLeafAndReloads) {
  EffectiveConfig e = build(R"({"train_batch_size": "auto", "gradient_clipping": 1.0})");
  std::string text = render_effective_config(e);
  EXPECT_NE(text.find("\"train_batch_size\": \"auto\","), std::string::npos) << text;
  EXPECT_NE(text.find("// auto"), std::string::npos);
  EXPECT_NE(text.find("\"gradient_clipping\": 1.0,"), std::string::npos);
  EXPECT_TRUE(load_ds_config_text(text, "r").ok());
}

TEST(Effective, ResolveFromFlag) {
  EffectiveConfig e = build(R"({"optimizer": {"type": "AdamW", "params": {"lr": "auto",
      "weight_decay": 0.1}}, "gradient_clipping": 1.0})");
  EXPECT_TRUE(resolve_from_flag(e, "optimizer.params.lr", 3e-4, "--learning_rate").ok());
  EXPECT_EQ(e.json["optimizer"]["params"]["lr"], 3e-4);
  EXPECT_EQ(e.origin("optimizer.params.lr"), Origin::kFlag);
  EXPECT_TRUE(resolve_from_flag(e, "optimizer.params.weight_decay", 0.1, "--weight_decay").ok());
  Status s = resolve_from_flag(e, "gradient_clipping", 0.5, "--max_grad_norm");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("gradient_clipping: the config sets 1.0 but the flag --max_grad_norm "
                             "says 0.5"),
            std::string::npos)
      << s.message();
  // An absent key takes the flag (the flag was given explicitly).
  EXPECT_TRUE(resolve_from_flag(e, "train_micro_batch_size_per_gpu", 8, "--per_device").ok());
  EXPECT_EQ(e.json["train_micro_batch_size_per_gpu"], 8);
}

}  // namespace
}  // namespace zero::config
