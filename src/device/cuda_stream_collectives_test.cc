// StreamCollectives on the CUDA backend with NCCL (stream_collectives.h), on one GPU (a world of
// one: the lent machines have one): the collectives, as one ncclGroupStart/End group, wait on
// NCCL's stream for the event recorded on the compute stream behind a held host function, `done`
// stays pending until it is released, and the comm stream reads the result behind `done`.
// Skips without a GPU; several ranks run on the emulator (nccl_emu_test, cuda_engine_emu_test).
#include <cuda_runtime.h>

#include <future>
#include <vector>

#include <gtest/gtest.h>

#include "comm/thread_communicator.h"
#include "device/cuda_stream.h"
#include "device/stream_collectives.h"
#include "kernels/cuda_test_util.h"

#if defined(ZERO_WITH_NCCL)
#include "comm/nccl_communicator.h"

namespace zero::device {
namespace {

// A host function that holds a stream until released.
struct Gate {
  std::promise<void> opened;
  std::shared_future<void> open = opened.get_future().share();
  static void CUDART_CB hold(void* gate) { static_cast<Gate*>(gate)->open.wait(); }
};

TEST(CudaStreamCollectives, GroupWaitsForItsProducersEventAndRecordsDone) {
  ZERO_SKIP_WITHOUT_GPU();
  ThreadCommunicator::run(1, [](Communicator& threads) {
    auto ctx = ExecutionContext::create(Device::kCuda);
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    auto nccl = NcclCommunicator::create(threads, 30000);
    ASSERT_TRUE(nccl.ok()) << nccl.status().to_string();
    auto collectives = make_stream_collectives(**nccl, **ctx);
    ASSERT_TRUE(collectives.ok()) << collectives.status().to_string();
    Backend& backend = (*ctx)->backend();
    auto& compute = static_cast<CudaStream&>((*ctx)->compute());
    constexpr int64_t kNumel = 4099;
    auto buf = backend.allocate(DType::kF32, kNumel);
    ASSERT_TRUE(buf.ok());
    std::vector<float> produced(kNumel), got(kNumel, -1.0f);
    for (int64_t i = 0; i < kNumel; ++i) produced[static_cast<size_t>(i)] = 0.5f * i;
    const TensorView host_in{produced.data(), DType::kF32, Shape{kNumel}, Device::kCpu};
    const TensorView host_out{got.data(), DType::kF32, Shape{kNumel}, Device::kCpu};

    // The upload first: a pageable copy may wait for its stream, which the gate holds next.
    backend.transfer(compute, buf->view(), host_in);
    Gate gate;
    compute.activate();
    ASSERT_EQ(cudaLaunchHostFunc(compute.get(), &Gate::hold, &gate), cudaSuccess);
    std::unique_ptr<Event> ready = backend.create_event();
    compute.record(*ready);
    // A group of two (an all-reduce and a broadcast: both identities in a world of one).
    const CollectiveCall calls[2] = {{CommKind::kAllReduce, ReduceOp::kSum, DType::kF32,
                                      buf->data(), buf->data(), static_cast<size_t>(kNumel), 0},
                                     {CommKind::kBroadcast, ReduceOp::kSum, DType::kF32,
                                      buf->data(), buf->data(), static_cast<size_t>(kNumel), 0}};
    OrderedCollective c = (*collectives)->issue(*ready, calls);
    (*ctx)->comm().wait(*c.done);
    EXPECT_FALSE(c.done->query());  // held behind the producer's stream
    gate.opened.set_value();
    // After the gate: a download to pageable memory returns only once it has run.
    backend.transfer((*ctx)->comm(), host_out, buf->view());
    EXPECT_TRUE(c.handle.wait().ok());
    ASSERT_TRUE((*ctx)->comm().synchronize().ok());
    ASSERT_TRUE(compute.synchronize().ok());
    EXPECT_EQ(got, produced);
    EXPECT_EQ((*nccl)->stats()[CommKind::kAllReduce].calls, 1);
    EXPECT_EQ((*nccl)->stats()[CommKind::kBroadcast].calls, 1);
  });
}

}  // namespace
}  // namespace zero::device

#endif  // ZERO_WITH_NCCL
