// TrainMonitor: DeepSpeed's monitors — `tensorboard` (event files) and `csv_monitor` (CSV files) —
// fed the same scalars, at DeepSpeed's tag names where it has them, with DeepSpeed's x-axis (global
// samples). Rank 0 only. docs/config.md lists the tags.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config/ds_config.h"
#include "core/status.h"
#include "runtime/csv_monitor.h"
#include "runtime/metrics.h"
#include "runtime/tensorboard_monitor.h"

namespace zero::runtime {

// The scalars of one step as (tag, value), in a fixed order: DeepSpeed's Train/Samples/train_loss,
// Train/Samples/lr and (fp16 only, as DeepSpeed) Train/Samples/loss_scale; then ours under the same
// prefix: grad_norm, tokens_per_second, mfu, gpu_memory_used_mib, gpu_memory_peak_mib,
// host_rss_mib, host_rss_peak_mib (each only when `m` has it). Evaluation is write_eval's.
std::vector<std::pair<std::string, double>> step_scalars(const StepMetrics& m, bool fp16);

class TrainMonitor {
 public:
  // The monitors `ds` enables (tensorboard, csv_monitor), or nullptr when none is. An error names
  // the directory that could not be made.
  static StatusOr<std::unique_ptr<TrainMonitor>> open(const config::DsConfig& ds, bool fp16);

  // One step's step_scalars at x = `samples` (global samples seen after the step).
  Status write_step(int64_t samples, const StepMetrics& m);
  // Eval/Samples/eval_loss at x = `samples`.
  Status write_eval(int64_t samples, double eval_loss);

  // The event file, when tensorboard is enabled (else "").
  std::string tensorboard_path() const { return tensorboard_ ? tensorboard_->path() : ""; }

 private:
  Status write(const std::string& tag, int64_t samples, double value);

  std::unique_ptr<CsvMonitor> csv_;
  std::unique_ptr<TensorBoardMonitor> tensorboard_;
  bool fp16_ = false;
};

}  // namespace zero::runtime
