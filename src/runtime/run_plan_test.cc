// The run plan without running anything: flags resolving "auto", TrainingArguments' defaults, the
// batch triad for the world size, epochs counted as the HF Trainer does, contradictions named, and
// the DsConfig -> engine options mapping. (Before, all of this was tested only through the CLI.)
#include "runtime/run_plan.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "config/loader.h"
#include "config/validate.h"

namespace zero::runtime {
namespace {

model::ModelConfig tiny_model() {
  auto c = model::preset_model_config("gpt2-tiny");
  EXPECT_TRUE(c.ok());
  return *c;
}

// A ds_config file in the test's temp directory.
std::string write_config(const std::string& name, const std::string& json) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << json;
  return path;
}

TEST(RunPlan, FlagsAndDefaultsWithoutAConfig) {
  TrainArgs args;
  args.per_device_train_batch_size = 4;
  args.gradient_accumulation_steps = 2;
  args.max_steps = 10;
  auto plan = make_plan(args, tiny_model(), /*world=*/2, /*num_samples=*/1000);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->micro_batch, 4);
  EXPECT_EQ(plan->grad_accum, 2);
  EXPECT_EQ(plan->train_batch, 16);
  EXPECT_EQ(plan->max_steps, 10);
  EXPECT_EQ(plan->engine.dtype, DType::kF32);
  EXPECT_DOUBLE_EQ(plan->engine.optimizer.lr, 5e-5);  // TrainingArguments' default
  // No gradient_clipping key: DeepSpeed's default 0 (HF fills only an "auto" one).
  EXPECT_DOUBLE_EQ(plan->engine.gradient_clipping, 0.0);
  EXPECT_EQ(plan->engine.zero.stage, 0);
  // HF's linear schedule with no warmup starts at the full lr (not DeepSpeed's floor).
  EXPECT_DOUBLE_EQ(plan->engine.schedule.lr_at(1), 5e-5);
}

TEST(RunPlan, EpochsBecomeStepsAsTheHfTrainerCounts) {
  TrainArgs args;
  args.per_device_train_batch_size = 4;
  args.num_train_epochs = 2.0;
  // 100 samples / micro 4 = 25 batches; over 2 ranks ceil(25 / 2) = 13 per rank; accumulation 1:
  // 13 steps an epoch, 26 for two.
  auto plan = make_plan(args, tiny_model(), 2, 100);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->max_steps, 26);
}

TEST(RunPlan, AFlagContradictingTheConfigIsNamed) {
  TrainArgs args;
  args.deepspeed = write_config("zero_run_plan_lr.json",
                                R"({"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})");
  args.learning_rate = 2e-3;
  args.max_steps = 4;
  auto plan = make_plan(args, tiny_model(), 1, 100);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("--learning_rate"), std::string::npos)
      << plan.status().message();
  EXPECT_NE(plan.status().message().find("optimizer.params.lr"), std::string::npos);
}

TEST(RunPlan, AutoValuesTakeTheFlags) {
  TrainArgs args;
  args.deepspeed = write_config("zero_run_plan_auto.json", R"({
    "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
    "bf16": {"enabled": "auto"},
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}},
    "zero_optimization": {"stage": 2}})");
  args.per_device_train_batch_size = 2;
  args.gradient_accumulation_steps = 3;
  args.learning_rate = 3e-4;
  args.bf16 = true;
  args.max_steps = 5;
  auto plan = make_plan(args, tiny_model(), 1, 100);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ(plan->train_batch, 6);
  EXPECT_DOUBLE_EQ(plan->engine.optimizer.lr, 3e-4);
  EXPECT_EQ(plan->engine.dtype, DType::kBF16);
  EXPECT_EQ(plan->engine.zero.stage, 2);
  // communication_data_type unset: gradients travel in the model dtype, as in DeepSpeed.
  EXPECT_EQ(plan->engine.zero.comm_dtype, DType::kBF16);
}

TEST(RunPlan, ZeroAndOffloadOptionsFromTheTypedConfig) {
  TrainArgs args;
  args.deepspeed = write_config("zero_run_plan_z3.json", R"({
    "train_micro_batch_size_per_gpu": 1,
    "zero_optimization": {
      "stage": 3, "overlap_comm": true, "reduce_bucket_size": 1234,
      "stage3_prefetch_bucket_size": 567, "stage3_param_persistence_threshold": 89,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp/zero_nvme", "pipeline_read": true,
                            "ratio": 0.5},
      "offload_param": {"device": "cpu", "pin_memory": true}},
    "aio": {"block_size": 262144, "queue_depth": 4}})");
  args.max_steps = 3;
  auto plan = make_plan(args, tiny_model(), 1, 100);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const sharding::ZeroOptions& z = plan->engine.zero;
  EXPECT_EQ(z.stage, 3);
  EXPECT_TRUE(z.overlap_comm);
  EXPECT_EQ(z.reduce_bucket_numel, 1234);
  EXPECT_EQ(z.prefetch_bucket_numel, 567);
  EXPECT_EQ(z.param_persistence_threshold_numel, 89);
  const OffloadOptions& off = plan->engine.offload;
  EXPECT_EQ(off.optimizer, OptimizerOffload::kNvme);
  EXPECT_EQ(off.nvme_path, "/tmp/zero_nvme");
  EXPECT_TRUE(off.pipeline_read);
  EXPECT_FALSE(off.pipeline_write);
  EXPECT_DOUBLE_EQ(off.ratio, 0.5);
  EXPECT_EQ(off.aio.block_size_bytes, 262144u);
  EXPECT_EQ(off.aio.queue_depth, 4);
  EXPECT_EQ(off.param.device, sharding::ParamOffload::kCpu);
  EXPECT_TRUE(off.param.pin_memory);
}

TEST(RunPlan, BatchTriadThatCannotHoldIsNamed) {
  TrainArgs args;
  args.deepspeed = write_config("zero_run_plan_triad.json",
                                R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4})");
  args.max_steps = 2;
  auto plan = make_plan(args, tiny_model(), 2, 100);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("train_batch_size"), std::string::npos)
      << plan.status().message();
}

}  // namespace
}  // namespace zero::runtime

namespace zero::runtime {
namespace {

// `zero config check` and `zero train` judge the stage / offload rules alike (one function,
// config::apply_zero_rules): over stages x optimizer offload x parameter offload x ratio, the
// config is valid exactly when the run plan accepts it, and every warning the validator gives for
// those blocks is in the plan's notes (so nothing the engine changed goes unsaid).
TEST(RunPlan, ConfigCheckAndTheEngineApplyTheSameZeroRules) {
  const char* devices[] = {"none", "cpu", "nvme"};
  int cases = 0, refused = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    for (const char* optim : devices) {
      for (const char* param : devices) {
        for (const char* ratio : {"", ", \"ratio\": 0.5"}) {
          const std::string json = fmt::format(
              R"({{"train_micro_batch_size_per_gpu": 2, "zero_optimization": {{"stage": {},
              "offload_optimizer": {{"device": "{}", "nvme_path": "/tmp/zr"{}}},
              "offload_param": {{"device": "{}", "nvme_path": "/tmp/zr"}}}}}})",
              stage, optim, ratio, param);
          const std::string path = write_config("zero_rules_agree.json", json);
          auto loaded = config::load_ds_config_file(path);
          ASSERT_TRUE(loaded.ok()) << json;
          const config::ValidationReport report = config::validate_ds_config(loaded->json, {});
          TrainArgs args;
          args.deepspeed = path;
          args.max_steps = 1;
          auto plan = make_plan(args, tiny_model(), 1, 100);
          ++cases;
          refused += !report.ok();
          ASSERT_EQ(report.ok(), plan.ok())
              << json << "\nconfig check:\n"
              << report.format() << "plan: " << (plan.ok() ? "ok" : plan.status().to_string());
          if (!plan.ok()) continue;
          for (const config::Diagnostic& d : report.diagnostics) {
            if (d.path.rfind("zero_optimization.offload", 0) != 0) continue;
            const std::string line = config::format_diagnostic(d);
            EXPECT_NE(std::find(plan->notes.begin(), plan->notes.end(), line), plan->notes.end())
                << line;
          }
        }
      }
    }
  }
  EXPECT_EQ(cases, 72);
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace zero::runtime
