// StreamCollectives on the CPU backend (stream_collectives.h): a collective waits for the event
// after its producer (never reads a block before the compute stream wrote it), its `done` event
// orders the consumer, and a unit's owner broadcasts complete as one group. Ranks as threads,
// random stream delays, worlds 2-4.
#include "device/stream_collectives.h"

#include <chrono>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/thread_communicator.h"

namespace zero::device {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kBlock = 7;  // a prime, per rank

// Each rank's compute stream writes its block (rank + 1) behind a gate; the gather (all-gather, or
// one broadcast per owner as one group) is issued at once, waiting for an event after the write;
// the compute stream waits for `done` and copies the unit out. Before the gate opens, `done` must
// still be pending (the collective waits for its producer on every rank).
void gather_behind_a_gate(int world, bool owner_broadcasts) {
  ThreadCommunicator::run(world, [&](Communicator& comm) {
    auto ctx = ExecutionContext::create(Device::kCpu,
                                        {.max_delay_us = 50, .delay_seed = 17u + comm.rank()});
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    auto collectives = make_stream_collectives(comm, **ctx);
    ASSERT_TRUE(collectives.ok()) << collectives.status().to_string();
    Backend& backend = (*ctx)->backend();
    Stream& compute = (*ctx)->compute();
    const int64_t numel = kBlock * world;
    auto unit = backend.allocate(DType::kF32, numel);
    ASSERT_TRUE(unit.ok());
    auto* base = static_cast<float*>(unit->data());
    std::fill(base, base + numel, 0.0f);
    float* own = base + kBlock * comm.rank();

    std::promise<void> gate;
    std::shared_future<void> open = gate.get_future().share();
    static_cast<CpuStream&>(compute).enqueue([open, own, r = comm.rank()] {
      open.wait();
      std::fill(own, own + kBlock, static_cast<float>(r + 1));
      return ok_status();
    });
    std::unique_ptr<Event> ready = backend.create_event();
    compute.record(*ready);
    std::vector<CollectiveCall> calls;
    if (owner_broadcasts) {
      for (int r = 0; r < world; ++r) {
        float* block = base + kBlock * r;
        calls.push_back({CommKind::kBroadcast, ReduceOp::kSum, DType::kF32, block, block,
                         static_cast<size_t>(kBlock), r});
      }
    } else {
      calls.push_back({CommKind::kAllGather, ReduceOp::kSum, DType::kF32, own, base,
                       static_cast<size_t>(kBlock), 0});
    }
    OrderedCollective c = (*collectives)->issue(*ready, calls);
    std::vector<float> got(static_cast<size_t>(numel));
    compute.wait(*c.done);
    static_cast<CpuStream&>(compute).enqueue([&got, base, numel] {
      std::memcpy(got.data(), base, static_cast<size_t>(numel) * sizeof(float));
      return ok_status();
    });
    std::this_thread::sleep_for(2ms);
    EXPECT_FALSE(c.done->query());  // held behind this rank's producer
    EXPECT_FALSE(c.handle.done());
    gate.set_value();
    ASSERT_TRUE(compute.synchronize().ok());
    EXPECT_TRUE(c.handle.wait().ok());
    std::vector<float> want;
    for (int r = 0; r < world; ++r) want.insert(want.end(), kBlock, static_cast<float>(r + 1));
    EXPECT_EQ(got, want);
    const CommKind kind = owner_broadcasts ? CommKind::kBroadcast : CommKind::kAllGather;
    EXPECT_EQ(comm.stats()[kind].calls, owner_broadcasts ? world : 1);
  });
}

TEST(CpuStreamCollectives, AllGatherWaitsForItsProducerAndOrdersItsConsumer) {
  for (int world = 2; world <= 4; ++world) {
    SCOPED_TRACE(::testing::Message() << "world " << world);
    gather_behind_a_gate(world, /*owner_broadcasts=*/false);
  }
}

TEST(CpuStreamCollectives, OwnerBroadcastsOfAUnitCompleteAsOneGroup) {
  for (int world = 2; world <= 4; ++world) {
    SCOPED_TRACE(::testing::Message() << "world " << world);
    gather_behind_a_gate(world, /*owner_broadcasts=*/true);
  }
}

// A failed collective (calls that do not match across ranks) is reported through its handle, not
// the stream, and the collectives after it still run on every rank.
TEST(CpuStreamCollectives, AFailedCollectiveIsReportedByItsHandle) {
  ThreadCommunicator::run(2, [&](Communicator& comm) {
    auto ctx = ExecutionContext::create(Device::kCpu);
    ASSERT_TRUE(ctx.ok());
    auto collectives = make_stream_collectives(comm, **ctx);
    ASSERT_TRUE(collectives.ok());
    std::unique_ptr<Event> ready = (*ctx)->backend().create_event();
    float x[2] = {1.0f, 1.0f};
    const size_t numel = comm.rank() == 0 ? 1 : 2;  // mismatched sizes
    CollectiveCall bad{CommKind::kAllReduce, ReduceOp::kSum, DType::kF32, x, x, numel, 0};
    OrderedCollective c1 = (*collectives)->issue(*ready, {&bad, 1});
    float y = 2.0f;
    CollectiveCall good{CommKind::kAllReduce, ReduceOp::kSum, DType::kF32, &y, &y, 1, 0};
    OrderedCollective c2 = (*collectives)->issue(*ready, {&good, 1});
    EXPECT_FALSE(c1.handle.wait().ok());
    EXPECT_TRUE(c2.handle.wait().ok());
    EXPECT_TRUE((*ctx)->comm().synchronize().ok());
    EXPECT_EQ(y, 4.0f);
  });
}

}  // namespace
}  // namespace zero::device
