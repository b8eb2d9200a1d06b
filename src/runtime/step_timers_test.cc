// wall_clock_breakdown timers: DeepSpeed's names and format, means per optimizer step, reset per
// log line, nothing recorded when disabled.
#include "runtime/step_timers.h"

#include <gtest/gtest.h>

namespace zero::runtime {
namespace {

TEST(StepTimers, DeepSpeedLineOfMeansPerStep) {
  StepTimers t(true);
  // Two optimizer steps of two micro-steps each.
  for (double fwd : {10.0, 20.0, 30.0, 40.0}) t.add(StepPhase::kForward, fwd);
  t.add(StepPhase::kBackwardInner, 50.0);
  t.add(StepPhase::kBackwardInner, 70.0);
  t.add(StepPhase::kBackwardAllreduce, 3.0);
  t.add(StepPhase::kBackwardAllreduce, 2.0);
  t.add(StepPhase::kStep, 9.0);
  t.add(StepPhase::kStep, 8.0);
  t.end_step();
  t.end_step();
  // DeepSpeed: "time (ms) | fwd: ... | bwd: ... | bwd_inner: ... | bwd_allreduce: ... | step: ..."
  // with bwd covering bwd_inner and bwd_allreduce.
  EXPECT_EQ(t.log_line_and_reset(),
            "time (ms) | fwd: 50.00 | bwd: 62.50 | bwd_inner: 60.00 | bwd_allreduce: 2.50 | "
            "step: 8.50");
  // A new window.
  EXPECT_EQ(t.steps(), 0);
  t.add(StepPhase::kForward, 1.234);
  t.end_step();
  EXPECT_EQ(t.log_line_and_reset(),
            "time (ms) | fwd: 1.23 | bwd: 0.00 | bwd_inner: 0.00 | bwd_allreduce: 0.00 | "
            "step: 0.00");
}

TEST(StepTimers, DisabledRecordsNothing) {
  StepTimers t(false);
  EXPECT_FALSE(t.enabled());
  t.add(StepPhase::kForward, 5.0);
  { StepTimers::Scope s(t, StepPhase::kStep); }
  t.end_step();
  EXPECT_EQ(t.steps(), 0);
  EXPECT_EQ(t.total_ms(StepPhase::kForward), 0.0);
  EXPECT_EQ(t.total_ms(StepPhase::kStep), 0.0);
}

TEST(StepTimers, ScopeAddsItsWallTime) {
  StepTimers t(true);
  { StepTimers::Scope s(t, StepPhase::kBackwardInner); }
  EXPECT_GE(t.total_ms(StepPhase::kBackwardInner), 0.0);
  EXPECT_LT(t.total_ms(StepPhase::kBackwardInner), 1000.0);
  EXPECT_EQ(t.total_ms(StepPhase::kForward), 0.0);
}

}  // namespace
}  // namespace zero::runtime
