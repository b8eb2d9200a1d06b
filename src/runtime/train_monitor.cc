// DeepSpeed's monitors fed one set of scalars (train_monitor.h).
#include "runtime/train_monitor.h"

namespace zero::runtime {

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
}

std::vector<std::pair<std::string, double>> step_scalars(const StepMetrics& m, bool fp16) {
  std::vector<std::pair<std::string, double>> out = {
      {"Train/Samples/train_loss", m.loss},
      {"Train/Samples/lr", m.lr},
  };
  if (fp16) out.emplace_back("Train/Samples/loss_scale", m.loss_scale);
  out.emplace_back("Train/Samples/grad_norm", m.grad_norm);
  if (m.tokens_per_s) out.emplace_back("Train/Samples/tokens_per_second", *m.tokens_per_s);
  if (m.mfu) out.emplace_back("Train/Samples/mfu", *m.mfu);
  auto mib = [&out](const char* tag, const std::optional<int64_t>& bytes) {
    if (bytes) out.emplace_back(tag, static_cast<double>(*bytes) / kMiB);
  };
  mib("Train/Samples/gpu_memory_used_mib", m.gpu_memory_used_bytes);
  mib("Train/Samples/gpu_memory_peak_mib", m.gpu_memory_peak_bytes);
  mib("Train/Samples/host_rss_mib", m.host_rss_bytes);
  mib("Train/Samples/host_rss_peak_mib", m.host_rss_peak_bytes);
  return out;
}

StatusOr<std::unique_ptr<TrainMonitor>> TrainMonitor::open(const config::DsConfig& ds, bool fp16) {
  if (!ds.csv_monitor.enabled.value && !ds.tensorboard.enabled.value) {
    return std::unique_ptr<TrainMonitor>();
  }
  auto monitor = std::make_unique<TrainMonitor>();
  monitor->fp16_ = fp16;
  if (ds.csv_monitor.enabled.value) {
    monitor->csv_ = std::make_unique<CsvMonitor>(ds.csv_monitor.output_path.value,
                                                 ds.csv_monitor.job_name.value);
  }
  if (ds.tensorboard.enabled.value) {
    ZERO_ASSIGN_OR_RETURN(
        monitor->tensorboard_,
        TensorBoardMonitor::open(ds.tensorboard.output_path.value, ds.tensorboard.job_name.value));
  }
  return monitor;
}

Status TrainMonitor::write_step(int64_t samples, const StepMetrics& m) {
  for (const auto& [tag, value] : step_scalars(m, fp16_)) {
    ZERO_RETURN_IF_ERROR(write(tag, samples, value));
  }
  return ok_status();
}

Status TrainMonitor::write_eval(int64_t samples, double eval_loss) {
  return write("Eval/Samples/eval_loss", samples, eval_loss);
}

Status TrainMonitor::write(const std::string& tag, int64_t samples, double value) {
  if (csv_) ZERO_RETURN_IF_ERROR(csv_->write(tag, samples, value));
  if (tensorboard_) ZERO_RETURN_IF_ERROR(tensorboard_->write(tag, samples, value));
  return ok_status();
}

}  // namespace zero::runtime
