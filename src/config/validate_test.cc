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
  EXPECT_TRUE(check(R"({"wandb": {"enabled": false, "project": "x"}})").diagnostics.empty());
  auto r = check(R"({"comms_logger": {"enabled": true}, "zero_optimization": {"stage": 3,
      "zero_quantized_weights": true}})");
  EXPECT_TRUE(has(r, "warning: comms_logger.enabled: not implemented by ZeRO.cpp"));
  EXPECT_TRUE(has(r, "warning: zero_optimization.zero_quantized_weights: not implemented"));
}

// Issue 32 item 4: tensorboard is implemented (no warning); W&B and Comet point to the monitors
// that are.
// bf16 master weights / optimizer states: implemented (no "not implemented" warning) where
// DeepSpeed allows them, errors naming the key where it does not (config::apply_zero_rules).
TEST(Validate, Bf16OptimizerStateFollowsTheZeroRules) {
  auto ok = check(R"({"bf16": {"enabled": true, "bf16_master_weights_and_grads": true,
      "bf16_optimizer_states": true}, "zero_optimization": {"stage": 2}})");
  EXPECT_TRUE(ok.diagnostics.empty()) << ok.format();
  auto offloaded = check(R"({"bf16": {"enabled": true, "bf16_master_weights_and_grads": true},
      "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}})");
  EXPECT_TRUE(offloaded.diagnostics.empty()) << offloaded.format();
  // No zero_optimization block: stage 0.
  auto no_zero = check(R"({"bf16": {"enabled": true, "bf16_master_weights_and_grads": true,
      "bf16_optimizer_states": true}})");
  EXPECT_TRUE(has(no_zero,
                  "error: bf16.bf16_master_weights_and_grads: only supported with ZeRO "
                  "stage 1, 2 or 3"))
      << no_zero.format();
  auto no_offload = check(R"({"bf16": {"enabled": true, "bf16_master_weights_and_grads": true},
      "zero_optimization": {"stage": 1}})");
  EXPECT_TRUE(has(no_offload,
                  "error: bf16.bf16_master_weights_and_grads: fp32 optimizer states "
                  "with bf16 master weights need ZeRO-Offload"))
      << no_offload.format();
  auto states_alone = check(R"({"bf16": {"enabled": true, "bf16_optimizer_states": true},
      "zero_optimization": {"stage": 1}})");
  EXPECT_TRUE(has(states_alone,
                  "error: bf16.bf16_optimizer_states: requires "
                  "bf16.bf16_master_weights_and_grads to be true"))
      << states_alone.format();
}

TEST(Validate, TensorboardIsImplementedAndWandbCometPointToIt) {
  EXPECT_TRUE(check(R"({"tensorboard": {"enabled": true, "output_path": "tb", "job_name": "j"}})")
                  .diagnostics.empty());
  auto r = check(R"({"wandb": {"enabled": true}, "comet": {"enabled": true}})");
  for (const char* block : {"wandb", "comet"}) {
    EXPECT_TRUE(has(r, std::string("warning: ") + block +
                           ".enabled: not implemented by ZeRO.cpp; this setting is ignored (not "
                           "supported: use tensorboard or csv_monitor, which ZeRO.cpp writes)"))
        << r.format();
  }
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
  auto r = check(R"({"gradient_clipin": 1, "fp16": {"enabled": "sometimes"}, "zero_optimization":
      {"stage": 9}})");
  EXPECT_EQ(r.error_count(), 3) << r.format();
}

TEST(Validate, DiagnosticFormat) {
  EXPECT_EQ(format_diagnostic({Severity::kError, "a.b", "bad", "fix it"}),
            "error: a.b: bad (fix it)");
  EXPECT_EQ(format_diagnostic({Severity::kWarning, "a", "meh", ""}), "warning: a: meh");
}

TEST(StringBooleans, PydanticRule) {
  // pydantic-core str_as_bool: case-insensitive words, exact "0" / "1", no trimming.
  for (const char* t : {"true", "True", "TRUE", "yes", "Yes", "on", "ON", "t", "T", "y", "1"}) {
    EXPECT_EQ(pydantic_bool(t), true) << t;
  }
  for (const char* f : {"false", "False", "FALSE", "no", "No", "off", "OFF", "f", "F", "n", "0"}) {
    EXPECT_EQ(pydantic_bool(f), false) << f;
  }
  for (const char* s : {"auto", "", " true", "false ", "2", "00", "enabled", "truee", "nope"}) {
    EXPECT_EQ(pydantic_bool(s), std::nullopt) << '"' << s << '"';
  }
}

// The HF guide's fp32 example writes "enabled": "false"; DeepSpeed 0.19's pydantic models read it
// as false. Before: "error: fp16.enabled: expected true or false, got \"false\"".
TEST(StringBooleans, AcceptedWithAWarningNamingTheKey) {
  auto r = check(R"({"fp16": {"enabled": "false"}, "bf16": {"enabled": "True"},
      "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "pin_memory": "yes"}},
      "wall_clock_breakdown": "0",
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "bias_correction": "off"}}})");
  EXPECT_TRUE(r.ok()) << r.format();
  EXPECT_EQ(r.warning_count(), 5) << r.format();
  EXPECT_TRUE(has(r,
                  "warning: fp16.enabled: \"false\" is a string; read as the boolean false "
                  "(pydantic's rule, as DeepSpeed reads it) (write false without quotes)"))
      << r.format();
  EXPECT_TRUE(has(r, "warning: bf16.enabled: \"True\" is a string; read as the boolean true"));
  EXPECT_TRUE(has(r, "warning: zero_optimization.offload_param.pin_memory: \"yes\" is a string"));
  EXPECT_TRUE(
      has(r, "warning: wall_clock_breakdown: \"0\" is a string; read as the boolean false"));
  EXPECT_TRUE(has(r, "warning: optimizer.params.bias_correction: \"off\" is a string"));
}

TEST(StringBooleans, RulesSeeTheBooleans) {
  // Both "true": the fp16/bf16 rule must fire as it does for JSON booleans.
  auto r = check(R"({"fp16": {"enabled": "true"}, "bf16": {"enabled": "yes"}})");
  EXPECT_TRUE(has(r, "error: fp16.enabled: fp16 and bf16 cannot both be enabled")) << r.format();
  // Without the loader (a Json built in code): the same reading and one warning per key.
  Json doc = {{"fp16", {{"enabled", "false"}}}};
  ValidationReport raw = validate_ds_config(doc, {});
  EXPECT_TRUE(raw.ok()) << raw.format();
  EXPECT_EQ(raw.warning_count(), 1);
  EXPECT_TRUE(has(raw, "warning: fp16.enabled: \"false\" is a string; read as the boolean false"));
}

TEST(StringBooleans, OtherStringsAndAutoAreUnchanged) {
  auto r = check(R"({"fp16": {"enabled": "maybe"}, "bf16": {"enabled": " true"}})");
  EXPECT_TRUE(has(r, "error: fp16.enabled: expected true or false, got \"maybe\"")) << r.format();
  EXPECT_TRUE(has(r, "error: bf16.enabled: expected true or false, got \" true\""));
  auto a = check(R"({"fp16": {"enabled": "auto"}})");
  EXPECT_TRUE(a.diagnostics.empty()) << a.format();
  auto loaded =
      load_ds_config_text(R"({"fp16": {"enabled": "auto"}, "steps_per_print": "1"})", "t.json");
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->json["fp16"]["enabled"], "auto");
  EXPECT_EQ(loaded->json["steps_per_print"], "1");  // an integer key: not a boolean, stays
}

TEST(BatchTriad, ProductOverflowIsAnError) {
  // 8 * (2^61 + 1) * 1 wraps to 8 in int64: the triad used to be accepted as consistent.
  std::string path;
  auto r = derive_batch_triad({8, 8, int64_t{2305843009213693953}}, 1, &path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(path, "gradient_accumulation_steps");
  EXPECT_EQ(r.status().message(),
            "train_micro_batch_size_per_gpu 8 * gradient_accumulation_steps 2305843009213693953 "
            "* world size 1 overflows a 64-bit integer (at most 9223372036854775807)");
  EXPECT_FALSE(derive_batch_triad({std::nullopt, int64_t{1} << 40, int64_t{1} << 40}, 2).ok());
  EXPECT_FALSE(derive_batch_triad({std::nullopt, INT64_MAX, std::nullopt}, 2).ok());
  EXPECT_FALSE(derive_batch_triad({std::nullopt, int64_t{1} << 31, int64_t{1} << 31}, 2).ok());
  auto big = derive_batch_triad({std::nullopt, int64_t{1} << 30, int64_t{1} << 31}, 2);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(*big->train_batch_size, int64_t{1} << 62);
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
