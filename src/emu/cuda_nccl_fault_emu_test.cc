// Issue 32 item 2, an NCCL collective failing mid-run, on the CPU emulator's NCCL stand-in
// (docs/emu.md): two ranks train at stage 2 with their collectives on NCCL; rank 1's next
// collective after creation (a gradient reduce-scatter in the backward) fails as a broken
// connection does. Its step returns at once with one line naming the units the collective served,
// the collective, its bytes and the communicator's size; the rank then ends the job as the trainer
// does (abort_job), instead of its peer waiting out the 30-minute collective timeout.
#include "emu/cuda_emu.h"
// The emulator header must come first; <nccl.h> is the stand-in (shadow/ is searched first).
#include <nccl.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "comm/thread_communicator.h"
#include "emu/engine_emu_testing.h"

namespace zero::runtime {
namespace {

void step_with_a_broken_collective() {
  ThreadCommunicator::run(2, [&](Communicator& comm) {
    EngineOptions o = testing::tiny_cuda_options();
    o.zero.stage = 2;
    auto engine = testing::make_tiny_cuda_engine(std::move(o), &comm);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    ASSERT_EQ((*engine)->placement().collectives, "NCCL");
    // Why: the creation's own collectives must have run before the fault is armed.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_TRUE(comm.barrier().ok());
    if (comm.rank() == 0) {
      emu::nccl::set_collective_fault({.rank = 1, .skip = 0, .error = ncclSystemError});
    }
    ASSERT_TRUE(comm.barrier().ok());
    auto step = (*engine)->train_step({testing::tiny_micro_batch()});
    if (!step.ok()) {
      // What TrainingRun::stop does: one error line for the rank, then the job ends.
      std::fprintf(stderr, "[rank %d] error: %s\n", comm.rank(), step.status().message().c_str());
      comm.abort_job(1);
    }
  });
}

TEST(CudaEngineNcclFaultDeathTest, AFailingReduceScatterNamesItsUnitsAndEndsTheJob) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        step_with_a_broken_collective();
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(1),
      "\\[rank 1\\] error: gradients of units? [0-9]+.*: rank 1 of 2 \\(GPU 1\\): "
      "(reduce_scatter|all_reduce) #[0-9]+ of [0-9]+ bytes \\(f32\\): NCCL error unhandled system "
      "error");
}

}  // namespace
}  // namespace zero::runtime
