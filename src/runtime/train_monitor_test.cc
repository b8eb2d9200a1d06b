// The monitors' scalar set: DeepSpeed's tags first, ours after, MiB from bytes; both monitors
// written from one TrainMonitor (the CSV side read back here; the event file's bytes are
// tf_event_test.cc's).
#include "runtime/train_monitor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace zero::runtime {
namespace {

StepMetrics full_metrics() {
  StepMetrics m;
  m.loss = 2.5;
  m.lr = 1e-3;
  m.grad_norm = 0.75;
  m.loss_scale = 1024;
  m.tokens_per_s = 12345.0;
  m.mfu = 0.41;
  m.gpu_memory_used_bytes = int64_t{3} << 30;
  m.gpu_memory_peak_bytes = int64_t{4} << 30;
  m.host_rss_bytes = int64_t{512} << 20;
  m.host_rss_peak_bytes = int64_t{600} << 20;
  return m;
}

TEST(TrainMonitor, StepScalarsAreDeepSpeedsTagsThenOurs) {
  using Scalars = std::vector<std::pair<std::string, double>>;
  const Scalars want = {
      {"Train/Samples/train_loss", 2.5},
      {"Train/Samples/lr", 1e-3},
      {"Train/Samples/loss_scale", 1024},
      {"Train/Samples/grad_norm", 0.75},
      {"Train/Samples/tokens_per_second", 12345.0},
      {"Train/Samples/mfu", 0.41},
      {"Train/Samples/gpu_memory_used_mib", 3072},
      {"Train/Samples/gpu_memory_peak_mib", 4096},
      {"Train/Samples/host_rss_mib", 512},
      {"Train/Samples/host_rss_peak_mib", 600},
  };
  EXPECT_EQ(step_scalars(full_metrics(), /*fp16=*/true), want);
  // Without fp16 no loss scale (as DeepSpeed); without CUDA or a known GPU no MFU / GPU memory.
  StepMetrics cpu = full_metrics();
  cpu.mfu.reset();
  cpu.gpu_memory_used_bytes.reset();
  cpu.gpu_memory_peak_bytes.reset();
  const Scalars got = step_scalars(cpu, /*fp16=*/false);
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got[2].first, "Train/Samples/grad_norm");
  EXPECT_EQ(got[4].first, "Train/Samples/host_rss_mib");
}

TEST(TrainMonitor, NothingEnabledIsNoMonitorAndBothWriteTheSameScalars) {
  config::DsConfig ds;
  auto none = TrainMonitor::open(ds, false);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->get(), nullptr);

  const std::string root = testing::TempDir() + "/train_monitor_" + std::to_string(::getpid());
  std::filesystem::remove_all(root);
  ds.csv_monitor.enabled.value = true;
  ds.csv_monitor.output_path.value = root + "/csv";
  ds.csv_monitor.job_name.value = "j";
  ds.tensorboard.enabled.value = true;
  ds.tensorboard.output_path.value = root + "/tb";
  ds.tensorboard.job_name.value = "j";
  auto monitor = TrainMonitor::open(ds, false);
  ASSERT_TRUE(monitor.ok()) << monitor.status().to_string();
  ASSERT_NE(monitor->get(), nullptr);
  ASSERT_TRUE((*monitor)->write_step(8, full_metrics()).ok());
  ASSERT_TRUE((*monitor)->write_eval(8, 3.25).ok());
  EXPECT_EQ((*monitor)->tensorboard_path().rfind(root + "/tb/j/events.out.tfevents.", 0), 0u);
  std::ifstream csv(root + "/csv/j/Train_Samples_mfu.csv");
  std::stringstream text;
  text << csv.rdbuf();
  EXPECT_EQ(text.str(), "step,Train/Samples/mfu\n8,0.41\n");
  EXPECT_TRUE(std::filesystem::exists(root + "/csv/j/Eval_Samples_eval_loss.csv"));
  EXPECT_FALSE(std::filesystem::exists(root + "/csv/j/Train_Samples_loss_scale.csv"));
  monitor->reset();
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace zero::runtime
