// Step rates and memory samples (step_stats.h).
#include "runtime/step_stats.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/device.h"
#include "core/process_memory.h"

namespace zero::runtime {

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
}

std::optional<double> StepStats::mfu(double tokens_per_s) const {
  if (!options_.peak_flops_per_gpu || *options_.peak_flops_per_gpu <= 0) return std::nullopt;
  return tokens_per_s * options_.flops_per_token /
         (*options_.peak_flops_per_gpu * static_cast<double>(options_.world_size));
}

void StepStats::fill(StepMetrics& m, double step_s) {
  if (step_s > 0) {
    m.step_s = step_s;
    m.tokens_per_s = static_cast<double>(m.tokens) / step_s;
    m.mfu = mfu(*m.tokens_per_s);
  }
  if (options_.cuda) {
    // cudaMemGetInfo does not wait for the device: the step's queued work may still run.
    if (StatusOr<CudaMemoryInfo> gpu = cuda_memory_info(); gpu.ok()) {
      gpu_used_bytes_ = gpu->used_bytes;
      gpu_peak_bytes_ = std::max(gpu_peak_bytes_.value_or(0), gpu->used_bytes);
    }
    m.gpu_memory_used_bytes = gpu_used_bytes_;
    m.gpu_memory_peak_bytes = gpu_peak_bytes_;
  }
  if (std::optional<HostMemory> host = host_memory()) {
    host_rss_bytes_ = host->rss_bytes;
    m.host_rss_bytes = host->rss_bytes;
    m.host_rss_peak_bytes = host->rss_peak_bytes;
  }
}

std::string StepStats::progress_fields(double tokens_per_s) const {
  std::string out;
  if (std::optional<double> u = mfu(tokens_per_s)) out += fmt::format(" | MFU {:.1f}%", 100 * *u);
  if (options_.cuda) {
    if (gpu_used_bytes_) {
      out += fmt::format(" | GPU {:.0f} MiB (peak {:.0f} MiB)",
                         static_cast<double>(*gpu_used_bytes_) / kMiB,
                         static_cast<double>(gpu_peak_bytes_.value_or(0)) / kMiB);
    }
  } else if (host_rss_bytes_) {
    out += fmt::format(" | host RSS {:.0f} MiB", static_cast<double>(*host_rss_bytes_) / kMiB);
  }
  return out;
}

}  // namespace zero::runtime
