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
#include "model/model_config.h"
#include "runtime/engine.h"

namespace zero::runtime {
namespace {

void step_with_a_broken_collective() {
  ThreadCommunicator::run(2, [&](Communicator& comm) {
    auto config =
        model::load_model_config(std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/golden/gpt2_tiny");
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    EngineOptions o;
    o.model_config = *config;
    o.device = Device::kCuda;
    o.zero.stage = 2;
    o.check_memory = false;
    auto engine = Engine::create(
        std::move(o),
        [](int, int64_t b, int64_t e, float* dst) {
          std::fill(dst, dst + (e - b), 0.01f);
          return ok_status();
        },
        &comm);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    ASSERT_EQ((*engine)->placement().collectives, "NCCL");
    // Why: the creation's own collectives must have run before the fault is armed.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_TRUE(comm.barrier().ok());
    if (comm.rank() == 0) {
      emu::nccl::set_collective_fault({.rank = 1, .skip = 0, .error = ncclSystemError});
    }
    ASSERT_TRUE(comm.barrier().ok());
    MicroBatch mb;
    mb.batch = 2;
    mb.seq = 16;
    for (int64_t i = 0; i < mb.batch * mb.seq; ++i) {
      mb.tokens.push_back(static_cast<int32_t>(i % 60));
      mb.targets.push_back(static_cast<int32_t>((i + 1) % 60));
    }
    auto step = (*engine)->train_step({mb});
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
