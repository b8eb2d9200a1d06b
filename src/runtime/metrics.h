// MetricsWriter: OUT/metrics.jsonl, one JSON object per optimizer step (docs/design.md §2), written
// by rank 0 only. Floats are printed in shortest round-trip form so they read back exactly.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "core/status.h"

namespace zero::runtime {

struct StepMetrics {
  int64_t step = 0;        // optimizer steps completed, 1-based, continuing across resume
  double loss = 0.0;       // mean token cross-entropy over the global batch, before the update
  double lr = 0.0;         // the rate used by this step's update
  double grad_norm = 0.0;  // global, before clipping (unscaled)
  double loss_scale = 1.0;
  bool skipped = false;    // overflow: the update was skipped
  int64_t tokens = 0;      // tokens in this step's global batch
  double elapsed_s = 0.0;  // wall time since the start of this run
  // --validation_file: the evaluation run after this step's update (eval_loss: mean token
  // cross-entropy over the validation samples; eval_ppl = exp(eval_loss)), else absent.
  std::optional<double> eval_loss;
  std::optional<double> eval_ppl;
  // Watching the run (rank 0's view; absent where unknown). The step's wall time covers loading
  // its data, forward, backward and the update (not evaluation, not the checkpoint save).
  std::optional<double> step_s;
  std::optional<double> tokens_per_s;  // tokens / step_s
  // Model FLOPs utilization, 0..1: tokens_per_s x (6N + 12·L·C·T) / (world x the GPU's dense peak
  // for the training dtype); only on the CUDA device of a GPU in the peak table (runtime/mfu.h).
  std::optional<double> mfu;
  std::optional<int64_t> gpu_memory_used_bytes;  // cudaMemGetInfo after the step (whole GPU)
  std::optional<int64_t> gpu_memory_peak_bytes;  // the largest gpu_memory_used_bytes so far
  std::optional<int64_t> host_rss_bytes;         // resident set after the step
  std::optional<int64_t> host_rss_peak_bytes;    // the process's peak resident set (VmHWM)
};

// One JSON line (no trailing newline).
std::string metrics_json_line(const StepMetrics& m);
// The line of --eval_on_start, before any step: {"step": 0, "eval_loss": .., "eval_ppl": ..}
// (no "loss": no step was trained; readers of training losses skip it).
std::string eval_on_start_json_line(double eval_loss, double eval_ppl);

class MetricsWriter {
 public:
  MetricsWriter() = default;
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Opens (appends to) `path`; `truncate` starts a fresh file.
  Status open(const std::string& path, bool truncate);
  // Appends one line and flushes (a crash loses at most the line being written).
  Status write(const StepMetrics& m);
  // Appends one line as given (eval_on_start_json_line) and flushes.
  Status write_line(const std::string& line);
  // fdatasync: the lines written so far survive a machine crash. Called before a checkpoint is
  // published, so a published step N always has its metrics lines 1..N on disk.
  Status sync();

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

// What truncate_metrics kept.
struct MetricsTruncation {
  int64_t lines_kept = 0;
  int64_t steps_missing = 0;  // steps in [1, last_step] with no line (lost before this fix)
  int64_t first_missing = 0;  // the first of them (0 if none)
};

// Resume: rewrites `path` (crash-safely: temporary file, fsync, rename) to hold exactly one line
// per step <= last_step (and the step-0 line of --eval_on_start, not counted in lines_kept), in
// step order: lines after the checkpoint's step go, a step written
// twice (by a run that crashed after writing it and a resumed run) keeps its last line, and a
// torn last line from a crash is dropped. A missing file is not an error (nothing kept).
StatusOr<MetricsTruncation> truncate_metrics(const std::string& path, int64_t last_step);

}  // namespace zero::runtime
