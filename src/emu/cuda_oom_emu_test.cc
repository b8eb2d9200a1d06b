// Issue 32 item 2, out of device memory mid-run, on the CPU emulator (docs/emu.md), whose
// cudaMalloc counts each device's memory in use so ZERO_DEVICE_MEMORY_LIMIT acts as on a GPU: the
// first new device buffer of a step over the budget — the model's activation slab, or at stage 3 a
// gather buffer — is named (the buffer, the bytes asked, the plan's figure where it has one, what
// the device had, the limit) in one line, and the process ends with status 1 at once on both ranks
// (under mpirun a rank exiting non-zero ends the job) instead of aborting while a peer waits.
#include "emu/cuda_emu.h"
// The emulator header must come first: it redefines the CUDA runtime calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/thread_communicator.h"
#include "emu/engine_emu_testing.h"

namespace zero::runtime {
namespace {

constexpr int64_t kSeq = 16;

// Two ranks (threads on emulated devices 0 and 1) create an engine of the tiny GPT-2 at `stage`,
// then set the budget to the most either device has in use (the creation's plan check and
// allocations passed), so the step's first new device buffer is refused: at stage 3 the embedding
// unit's gather buffer, below it the model's activation slab.
void step_over_the_budget(int stage) {
  ThreadCommunicator::run(2, [&](Communicator& comm) {
    EngineOptions o = testing::tiny_cuda_options();
    o.zero.stage = stage;
    o.zero.param_persistence_threshold_numel = 0;  // every unit gathered
    auto engine = testing::make_tiny_cuda_engine(std::move(o), &comm);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    ASSERT_TRUE((*engine)->state_on_device());
    // Why float: the thread communicator reduces floats; the tiny model's bytes fit exactly.
    float in_use = static_cast<float>(emu::device_used_bytes(comm.rank()));
    ASSERT_TRUE(comm.all_reduce(&in_use, 1, DType::kF32, ReduceOp::kMax).ok());
    ASSERT_TRUE(comm.barrier().ok());
    if (comm.rank() == 0) {
      ::setenv("ZERO_DEVICE_MEMORY_LIMIT", std::to_string(static_cast<int64_t>(in_use)).c_str(), 1);
    }
    ASSERT_TRUE(comm.barrier().ok());
    (void)(*engine)->train_step({testing::tiny_micro_batch(2, kSeq)});
  });
}

TEST(CudaEngineOutOfMemoryDeathTest, FirstStepNamesTheSlabAndEndsTheJob) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        step_over_the_budget(2);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(1),
      "zero: error: out of GPU memory on device [01]: the CUDA model's activation slab for 2 x 16 "
      "tokens \\(f32\\) asks for [0-9]+ bytes .*the memory plan counted [0-9]+ bytes .*"
      "ZERO_DEVICE_MEMORY_LIMIT allows [0-9]+ bytes");
}

// Before, ZERO_CHECK aborted naming param_coordinator.cc's line and the backend's bare byte count.
TEST(CudaEngineOutOfMemoryDeathTest, AStage3GatherBufferNamesItsUnitAndEndsTheJob) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        step_over_the_budget(3);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(1),
      "zero: error: the gather buffer of unit [0-9]+ \\(stage 3; gathered units already hold 0 "
      "bytes, the memory plan counts [0-9]+ bytes for them at once\\): out of GPU memory on device "
      "[01]: a buffer of [0-9]+ f32 values asks for [0-9]+ bytes \\(.* MiB\\); the device has "
      ".* MiB free of 81920.0 MiB; ZERO_DEVICE_MEMORY_LIMIT allows [0-9]+ bytes");
}

}  // namespace
}  // namespace zero::runtime
