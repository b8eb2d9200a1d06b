// Issue 32 item 5: wall_clock_breakdown on the device path timed with CUDA events recorded on the
// compute stream (runtime/step_timers.h), on the CPU emulator (docs/emu.md), whose timing events
// note the host's clock when a stream runs the record: a phase counts the device work it queued
// when that work runs, not the microseconds the host took to queue it.
#include "emu/cuda_emu.h"
// The emulator header must come first: it redefines the CUDA runtime calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "device/backend.h"
#include "emu/engine_emu_testing.h"
#include "runtime/step_timers.h"

namespace zero::runtime {
namespace {

constexpr double kDeviceWorkMs = 60.0;

// The bwd_inner figure of a DeepSpeed breakdown line.
double bwd_inner_ms(const std::string& line) {
  const size_t at = line.find("bwd_inner: ");
  if (at == std::string::npos) return -1.0;
  return std::stod(line.substr(at + 11));
}

// One step whose backward phase queues kDeviceWorkMs of work on the stream and returns at once.
std::string time_queued_work(StepTimers& timers, device::Backend& backend, device::Stream& stream) {
  {
    StepTimers::Scope t(timers, StepPhase::kBackwardInner);
    backend.host_function(stream, [] {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(kDeviceWorkMs));
    });
  }
  timers.end_step();
  return timers.log_line_and_reset();
}

TEST(CudaStepTimers, APhaseCountsItsDeviceWorkNotItsLaunch) {
  auto backend = device::make_cuda_backend(0);
  ASSERT_TRUE(backend.ok()) << backend.status().to_string();
  std::unique_ptr<device::Stream> stream = (*backend)->create_stream("compute");
  StepTimers events(/*enabled=*/true);
  events.use_device_clock(**backend, *stream);
  ASSERT_TRUE(events.device_timed());
  const std::string line = time_queued_work(events, **backend, *stream);
  EXPECT_GE(bwd_inner_ms(line), kDeviceWorkMs * 0.9) << line;
  // The host's clock sees only the launch (what the breakdown printed before on the device path).
  StepTimers host(/*enabled=*/true);
  const std::string host_line = time_queued_work(host, **backend, *stream);
  EXPECT_LT(bwd_inner_ms(host_line), kDeviceWorkMs * 0.5) << host_line;
  ASSERT_TRUE(stream->synchronize().ok());
}

// Disabled timers take no device clock (no events recorded); the CPU backend has none.
TEST(CudaStepTimers, DisabledTimersAndTheCpuBackendStayOnTheHost) {
  auto cuda = device::make_cuda_backend(0);
  ASSERT_TRUE(cuda.ok()) << cuda.status().to_string();
  std::unique_ptr<device::Stream> stream = (*cuda)->create_stream("compute");
  StepTimers disabled(/*enabled=*/false);
  disabled.use_device_clock(**cuda, *stream);
  EXPECT_FALSE(disabled.device_timed());
  std::unique_ptr<device::Backend> cpu = device::make_cpu_backend();
  std::unique_ptr<device::Stream> cpu_stream = cpu->create_stream("compute");
  StepTimers on_cpu(/*enabled=*/true);
  on_cpu.use_device_clock(*cpu, *cpu_stream);
  EXPECT_FALSE(on_cpu.device_timed());
}

// The engine on the (emulated) GPU with wall_clock_breakdown: its timers run on the compute
// stream's events and give every phase of a step.
TEST(CudaStepTimers, TheEngineTimesItsPhasesWithDeviceEvents) {
  EngineOptions o = testing::tiny_cuda_options();
  o.wall_clock_breakdown = true;
  auto engine = testing::make_tiny_cuda_engine(std::move(o));
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  ASSERT_TRUE((*engine)->timers().device_timed());
  ASSERT_TRUE((*engine)->train_step({testing::tiny_micro_batch()}).ok());
  StepTimers& timers = (*engine)->timers();
  timers.resolve();
  EXPECT_EQ(timers.steps(), 1);
  for (StepPhase phase : {StepPhase::kForward, StepPhase::kBackwardInner, StepPhase::kStep}) {
    EXPECT_GT(timers.total_ms(phase), 0.0) << static_cast<int>(phase);
  }
  EXPECT_GE(timers.total_ms(StepPhase::kBackwardAllreduce), 0.0);  // a world of one
  EXPECT_NE(timers.log_line_and_reset().find("time (ms) | fwd: "), std::string::npos);
}

}  // namespace
}  // namespace zero::runtime
