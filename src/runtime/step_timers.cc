// DeepSpeed-style timer lines (see step_timers.h).
#include "runtime/step_timers.h"

#include <fmt/format.h>

namespace zero::runtime {

std::string StepTimers::log_line_and_reset() {
  const double n = steps_ > 0 ? static_cast<double>(steps_) : 1.0;
  auto mean = [&](StepPhase p) { return ms_[static_cast<size_t>(p)] / n; };
  const double bwd_inner = mean(StepPhase::kBackwardInner);
  const double bwd_allreduce = mean(StepPhase::kBackwardAllreduce);
  std::string line = fmt::format(
      "time (ms) | fwd: {:.2f} | bwd: {:.2f} | bwd_inner: {:.2f} | bwd_allreduce: {:.2f} | step: "
      "{:.2f}",
      mean(StepPhase::kForward), bwd_inner + bwd_allreduce, bwd_inner, bwd_allreduce,
      mean(StepPhase::kStep));
  ms_.fill(0.0);
  steps_ = 0;
  return line;
}

}  // namespace zero::runtime
