// Unit tests for validate_ds_config beyond the fixture files: legacy forms, "auto", warnings,
// quoting values as written, strict mode and the batch-triad derivation.
#include "config/validate.h"

#include <gtest/gtest.h>

#include "config/loader.h"

namespace zero::config {
namespace {

ValidationReport check(std::string_view text, ValidateOptions options = {}) {
  auto loaded = load_ds_config_text(text, "t.json");
  EXPECT_TRUE(loaded.ok()) << loaded.status().message();
  return validate_ds_config(loaded->json, options, &loaded->sources);
}

bool has(const ValidationReport& r, std::string_view line) {
  return r.format().find(line) != std::string::npos;
}

TEST(Validate, EmptyConfigIsValid) { EXPECT_TRUE(check("{}").diagnostics.empty()); }

TEST(Validate, AutoIsValidAnywhere) {
  auto r = check(R"({"train_batch_size": "auto", "zero_optimization": {"stage": "auto",
      "reduce_bucket_size": "auto", "offload_optimizer": {"device": "auto"}},
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto"}}})",
                 {.world_size = 4});
  EXPECT_TRUE(r.ok()) << r.format();
}

TEST(Validate, IntegralFloatsAreIntegers) {
  auto r = check(R"({"zero_optimization": {"stage": 3, "reduce_bucket_size": 2e8,
      "stage3_max_live_parameters": 1.4e10, "stage3_model_persistence_threshold": 1e14}})");
  EXPECT_TRUE(r.diagnostics.empty()) << r.format();
}

TEST(Validate, QuotesValuesAsWritten) {
  auto r = check(R"({"zero_optimization": {"stage": 2.50}})");
  EXPECT_TRUE(has(r, "error: zero_optimization.stage: expected an integer, got 2.50"))
      << r.format();
}

TEST(Validate, LegacyZeroBoolIsAWarning) {
  auto r = check(R"({"zero_optimization": true, "allgather_size": 2e8})");
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_TRUE(has(r, "warning: zero_optimization: legacy boolean form, read as {\"stage\": 1}"));
}

TEST(Validate, BfloatSixteenBlockIsDeprecatedAlias) {
  auto r = check(R"({"bfloat16": {"enabled": true}, "fp16": {"enabled": true}})");
  EXPECT_TRUE(has(r, "warning: bfloat16: deprecated; read as bf16"));
  EXPECT_TRUE(
      has(r, "error: fp16.enabled: fp16 and bf16 cannot both be enabled (bfloat16.enabled"));
  EXPECT_TRUE(has(check(R"({"bfloat16": {}, "bf16": {}})"),
                  "error: bfloat16: deprecated key given together with its successor bf16"));
}

TEST(Validate, UnderscoreKeysAreComments) {
  EXPECT_TRUE(check(R"({"_comment": "x", "zero_optimization": {"_note": 1, "stage": 1}})")
                  .diagnostics.empty());
}

TEST(Validate, StageDependentWarnings) {
  auto r = check(R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"},
      "offload_optimizer": {"device": "nvme"}, "stage3_max_live_parameters": 1e8}})");
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_TRUE(has(r, "warning: zero_optimization.offload_param: ignored below ZeRO stage 3"));
  EXPECT_TRUE(has(r,
                  "warning: zero_optimization.offload_optimizer.device: \"nvme\" is treated as "
                  "\"cpu\""));
  EXPECT_TRUE(has(r,
                  "warning: zero_optimization.stage3_max_live_parameters: only used by ZeRO "
                  "stage 3"));
}

TEST(Validate, UnimplementedFeatureWarnsOnlyWhenUsed) {
  EXPECT_TRUE(
      check(R"({"tensorboard": {"enabled": false, "output_path": "x"}})").diagnostics.empty());
  auto r = check(R"({"tensorboard": {"enabled": true}, "zero_optimization": {"stage": 3,
      "zero_quantized_weights": true}})");
  EXPECT_TRUE(has(r, "warning: tensorboard.enabled: not implemented by ZeRO.cpp"));
  EXPECT_TRUE(has(r, "warning: zero_optimization.zero_quantized_weights: not implemented"));
}

TEST(Validate, ActivationPartitioningWithoutModelParallelismIsCalledOut) {
  auto r = check(R"({"activation_checkpointing": {"partition_activations": true,
      "contiguous_memory_optimization": true, "cpu_checkpointing": true,
      "synchronize_checkpoint_boundary": true, "number_checkpoints": 4}})");
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_TRUE(has(r,
                  "warning: activation_checkpointing.partition_activations: partitions "
                  "checkpointed activations across model-parallel ranks"));
  EXPECT_TRUE(
      has(r, "warning: activation_checkpointing.contiguous_memory_optimization: only acts"));
  EXPECT_EQ(r.warning_count(), 2) << r.format();  // cpu_checkpointing is implemented
}

TEST(Validate, AliasesAreBothFine) {
  EXPECT_TRUE(check(R"({"zero_optimization": {"stage": 3, "max_live_parameters": 1,
      "stage3_prefetch_bucket_size": 2, "gather_16bit_weights_on_model_save": true}})")
                  .diagnostics.empty());
}

TEST(Validate, NvmePathNeedNotExist) {
  EXPECT_TRUE(check(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme",
      "nvme_path": "/definitely/not/here"}}})")
                  .ok());
}

TEST(Validate, StrictTurnsWarningsIntoErrors) {
  auto r = check(R"({"cuda_visible_devices": "0"})", {.world_size = std::nullopt, .strict = true});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.warning_count(), 0);
}

TEST(Validate, EveryProblemIsReportedAtOnce) {
  auto r = check(R"({"gradient_clipin": 1, "fp16": {"enabled": "yes"}, "zero_optimization":
      {"stage": 9}})");
  EXPECT_EQ(r.error_count(), 3) << r.format();
}

TEST(Validate, DiagnosticFormat) {
  EXPECT_EQ(format_diagnostic({Severity::kError, "a.b", "bad", "fix it"}),
            "error: a.b: bad (fix it)");
  EXPECT_EQ(format_diagnostic({Severity::kWarning, "a", "meh", ""}), "warning: a: meh");
}

TEST(BatchTriad, DerivationRules) {
  auto d = [](std::optional<int64_t> t, std::optional<int64_t> m, std::optional<int64_t> g,
              int64_t w) {
    return derive_batch_triad({t, m, g}, w);
  };
  auto r = d(32, 4, std::nullopt, 4);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r->gradient_accumulation_steps, 2);
  r = d(32, std::nullopt, 2, 4);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r->micro_batch_per_gpu, 4);
  r = d(std::nullopt, 4, 2, 3);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r->train_batch_size, 24);
  r = d(16, std::nullopt, std::nullopt, 4);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r->micro_batch_per_gpu, 4);
  EXPECT_EQ(*r->gradient_accumulation_steps, 1);
  r = d(std::nullopt, 2, std::nullopt, 5);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r->train_batch_size, 10);
  std::string path;
  EXPECT_FALSE(derive_batch_triad({8, 4, std::nullopt}, 4, &path).ok());  // GAS = 0
  EXPECT_EQ(path, "gradient_accumulation_steps");
  EXPECT_FALSE(derive_batch_triad({std::nullopt, std::nullopt, 2}, 1, &path).ok());
  EXPECT_EQ(path, "train_micro_batch_size_per_gpu");
}

}  // namespace
}  // namespace zero::config
