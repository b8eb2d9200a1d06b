// DeepSpeed-style timer lines, host- or device-timed (see step_timers.h).
#include "runtime/step_timers.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "device/backend.h"

namespace zero::runtime {

StepTimers::~StepTimers() = default;

void StepTimers::use_device_clock(device::Backend& backend, device::Stream& stream) {
  if (!enabled_) return;
  std::unique_ptr<device::Event> probe = backend.create_timing_event();
  if (probe == nullptr) return;  // no device clock: host wall time
  backend_ = &backend;
  stream_ = &stream;
}

StepTimers::Scope::Scope(StepTimers& timers, StepPhase phase)
    : timers_(timers), phase_(phase), start_(std::chrono::steady_clock::now()) {
  if (timers_.enabled_ && timers_.backend_ != nullptr) pair_ = timers_.begin_device_phase(phase);
}

StepTimers::Scope::~Scope() {
  if (pair_ >= 0) {
    timers_.end_device_phase(pair_);
    return;
  }
  timers_.add(
      phase_,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count());
}

int StepTimers::begin_device_phase(StepPhase phase) {
  read_pairs(/*wait=*/false);  // frees the pairs of phases that have run
  size_t i = 0;
  while (i < pairs_.size() && pairs_[i].in_flight) ++i;
  if (i == pairs_.size()) {
    EventPair p;
    p.start = backend_->create_timing_event();
    p.end = backend_->create_timing_event();
    pairs_.push_back(std::move(p));
  }
  EventPair& p = pairs_[i];
  p.phase = phase;
  p.in_flight = true;
  p.ended = false;
  stream_->record(*p.start);
  return static_cast<int>(i);
}

void StepTimers::end_device_phase(int pair) {
  EventPair& p = pairs_[static_cast<size_t>(pair)];
  stream_->record(*p.end);
  p.ended = true;
}

void StepTimers::read_pairs(bool wait) {
  for (EventPair& p : pairs_) {
    // An open phase's end is not recorded yet (its previous record, or none, would be read).
    if (!p.in_flight || !p.ended) continue;
    if (!wait && !p.end->query()) continue;
    StatusOr<double> ms = backend_->elapsed_ms(*p.start, *p.end);
    if (ms.ok()) {
      ms_[static_cast<size_t>(p.phase)] += *ms;
    } else if (wait) {
      spdlog::warn("wall_clock_breakdown: {}", ms.status().message());
    } else {
      continue;  // not ready after all: read later
    }
    p.in_flight = false;
  }
}

void StepTimers::resolve() {
  if (backend_ != nullptr) read_pairs(/*wait=*/true);
}

std::string StepTimers::log_line_and_reset() {
  resolve();
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
