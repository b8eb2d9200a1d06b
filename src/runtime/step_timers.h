// DeepSpeed's wall_clock_breakdown: the engine's step phases on this rank, no collective added
// (rank 0 prints its own times; other ranks' are not gathered). Host wall time, or on a device
// path timing events recorded on the compute stream at each phase's start and end (as DeepSpeed's
// timers record CUDA events on the current stream): a phase's kernels are counted when they run,
// not when the host queued them.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device/stream.h"

namespace zero::device {
class Backend;
}  // namespace zero::device

namespace zero::runtime {
// DeepSpeed's global timers (deepspeed/utils/timer.py), one optimizer step each.
enum class StepPhase {
  kForward,            // "fwd": the forward passes of every micro-step
  kBackwardInner,      // "bwd_inner": the backward passes (overlapped reductions launched inside)
  kBackwardAllreduce,  // "bwd_allreduce": waiting for / running the remaining gradient reductions
  kStep,               // "step": global norm, loss scaler, optimizer update
};
inline constexpr int kNumStepPhases = 4;

// Sums of milliseconds per phase since the last log line. Disabled timers record nothing.
class StepTimers {
 public:
  explicit StepTimers(bool enabled = false) : enabled_(enabled) {}
  ~StepTimers();
  StepTimers(const StepTimers&) = delete;
  StepTimers& operator=(const StepTimers&) = delete;
  bool enabled() const { return enabled_; }

  // From now on, times the phases on `stream` with `backend`'s timing events, when it has them
  // (Backend::create_timing_event; the CPU backend has none and the phases stay host wall time).
  // A phase's events are read once they completed (checked without waiting when the next phase
  // starts) or, at the latest, by log_line_and_reset(), which waits for them.
  // REQUIRES: backend and stream outlive these timers.
  void use_device_clock(device::Backend& backend, device::Stream& stream);
  // Whether the phases are timed with device events.
  bool device_timed() const { return backend_ != nullptr; }

  void add(StepPhase phase, double ms) {
    if (enabled_) ms_[static_cast<size_t>(phase)] += ms;
  }
  // One optimizer step finished (the divisor of the next log line).
  void end_step() {
    if (enabled_) ++steps_;
  }
  int64_t steps() const { return steps_; }
  // Of the phases read so far (device-timed phases: see resolve()).
  double total_ms(StepPhase phase) const { return ms_[static_cast<size_t>(phase)]; }
  // Device-timed phases: reads every one recorded so far, waiting for their end events (a host
  // wait). Nothing to do otherwise.
  void resolve();

  // DeepSpeed's line, without its "[Rank 0] " prefix:
  //   time (ms) | fwd: F | bwd: B | bwd_inner: BI | bwd_allreduce: BA | step: S
  // each the mean per optimizer step since the last call (bwd = bwd_inner + bwd_allreduce), with
  // two decimals as DeepSpeed prints them; then starts a new window.
  std::string log_line_and_reset();

  // Times one phase from construction to destruction.
  class Scope {
   public:
    Scope(StepTimers& timers, StepPhase phase);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    StepTimers& timers_;
    StepPhase phase_;
    std::chrono::steady_clock::time_point start_;
    int pair_ = -1;  // device-timed: the index of its events in timers_.pairs_
  };

 private:
  // One phase's start and end events, in flight until read.
  struct EventPair {
    std::unique_ptr<device::Event> start, end;
    StepPhase phase = StepPhase::kForward;
    bool in_flight = false;  // recorded, not read yet
    bool ended = false;      // its end is recorded
  };
  int begin_device_phase(StepPhase phase);
  void end_device_phase(int pair);
  // Reads the in-flight pairs whose end completed (all of them with `wait`).
  void read_pairs(bool wait);

  bool enabled_;
  std::array<double, kNumStepPhases> ms_{};
  int64_t steps_ = 0;
  device::Backend* backend_ = nullptr;  // set by use_device_clock
  device::Stream* stream_ = nullptr;
  std::vector<EventPair> pairs_;  // reused once read
};

}  // namespace zero::runtime
