// DeepSpeed's wall_clock_breakdown: host wall time of the engine's step phases on this rank, no
// collective added (rank 0 prints its own times; other ranks' are not gathered).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>

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
  bool enabled() const { return enabled_; }

  void add(StepPhase phase, double ms) {
    if (enabled_) ms_[static_cast<size_t>(phase)] += ms;
  }
  // One optimizer step finished (the divisor of the next log line).
  void end_step() {
    if (enabled_) ++steps_;
  }
  int64_t steps() const { return steps_; }
  double total_ms(StepPhase phase) const { return ms_[static_cast<size_t>(phase)]; }

  // DeepSpeed's line, without its "[Rank 0] " prefix:
  //   time (ms) | fwd: F | bwd: B | bwd_inner: BI | bwd_allreduce: BA | step: S
  // each the mean per optimizer step since the last call (bwd = bwd_inner + bwd_allreduce), with
  // two decimals as DeepSpeed prints them; then starts a new window.
  std::string log_line_and_reset();

  // Times one phase from construction to destruction.
  class Scope {
   public:
    Scope(StepTimers& timers, StepPhase phase)
        : timers_(timers), phase_(phase), start_(std::chrono::steady_clock::now()) {}
    ~Scope() {
      timers_.add(phase_, std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - start_)
                              .count());
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    StepTimers& timers_;
    StepPhase phase_;
    std::chrono::steady_clock::time_point start_;
  };

 private:
  bool enabled_;
  std::array<double, kNumStepPhases> ms_{};
  int64_t steps_ = 0;
};

}  // namespace zero::runtime
