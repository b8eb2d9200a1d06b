// ThreadCommunicator against the reduction oracle (reduce16.h) for worlds 1-4, fp32 and 16-bit,
// odd sizes, many back-to-back collectives (ranks racing ahead), and mismatched calls.
#include "comm/thread_communicator.h"

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "comm/reduce16.h"

namespace zero {
namespace {

// Rank r's deterministic input of `numel` values stored as `dtype`.
std::vector<uint16_t> input16(int r, size_t numel, DType dtype) {
  std::vector<float> f(numel);
  std::mt19937 rng(static_cast<uint32_t>(r * 7919 + numel));
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (float& x : f) x = d(rng);
  std::vector<uint16_t> out(numel);
  convert_from_f32(f.data(), out.data(), dtype, numel);
  return out;
}
std::vector<float> input32(int r, size_t numel) {
  std::vector<float> f(numel);
  std::mt19937 rng(static_cast<uint32_t>(r * 104729 + numel));
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (float& x : f) x = d(rng);
  return f;
}

class ThreadComm : public ::testing::TestWithParam<int> {};

TEST_P(ThreadComm, AllReduceAndReduceScatterEqualTheOracle) {
  const int world = GetParam();
  constexpr size_t kBlock = 37;
  const size_t n = kBlock * static_cast<size_t>(world);
  // The oracle, in rank order.
  std::vector<std::vector<float>> in(static_cast<size_t>(world));
  std::vector<const void*> ptrs;
  for (int r = 0; r < world; ++r) {
    in[static_cast<size_t>(r)] = input32(r, n);
    ptrs.push_back(in[static_cast<size_t>(r)].data());
  }
  std::vector<float> want(n);
  reduce_reference(ptrs, want.data(), n, DType::kF32, ReduceOp::kSum);
  std::vector<std::vector<uint16_t>> in16(static_cast<size_t>(world));
  std::vector<const void*> ptrs16;
  for (int r = 0; r < world; ++r) {
    in16[static_cast<size_t>(r)] = input16(r, n, DType::kBF16);
    ptrs16.push_back(in16[static_cast<size_t>(r)].data());
  }
  std::vector<uint16_t> want16(n);
  reduce_reference(ptrs16, want16.data(), n, DType::kBF16, ReduceOp::kSum);

  std::atomic<int> failures{0};
  ThreadCommunicator::run(world, [&](Communicator& comm) {
    const size_t r = static_cast<size_t>(comm.rank());
    std::vector<float> buf = in[r];
    std::vector<uint16_t> buf16 = in16[r];
    std::vector<float> shard(kBlock);
    if (!comm.all_reduce(buf.data(), n, DType::kF32).ok()) ++failures;
    if (!comm.all_reduce(buf16.data(), n, DType::kBF16).ok()) ++failures;
    if (!comm.reduce_scatter(in[r].data(), shard.data(), kBlock, DType::kF32).ok()) ++failures;
    if (buf != want || buf16 != want16) ++failures;
    for (size_t i = 0; i < kBlock; ++i) {
      if (shard[i] != want[r * kBlock + i]) ++failures;
    }
  });
  EXPECT_EQ(failures.load(), 0);
}

TEST_P(ThreadComm, AllGatherBroadcastAndManyCollectivesInARow) {
  const int world = GetParam();
  constexpr size_t kBlock = 5;
  std::atomic<int> failures{0};
  ThreadCommunicator::run(world, [&](Communicator& comm) {
    const int r = comm.rank();
    for (int iter = 0; iter < 200; ++iter) {  // ranks race ahead into the next collective
      std::vector<float> mine(kBlock, static_cast<float>(r * 1000 + iter));
      std::vector<float> all(kBlock * static_cast<size_t>(world));
      if (!comm.all_gather(mine.data(), all.data(), kBlock, DType::kF32).ok()) ++failures;
      for (int s = 0; s < world; ++s) {
        if (all[static_cast<size_t>(s) * kBlock] != static_cast<float>(s * 1000 + iter)) {
          ++failures;
        }
      }
      float value = r == iter % world ? static_cast<float>(iter) : -1.0f;
      if (!comm.broadcast(&value, 1, DType::kF32, iter % world).ok()) ++failures;
      if (value != static_cast<float>(iter)) ++failures;
      float max = static_cast<float>(r);
      if (!comm.all_reduce(&max, 1, DType::kF32, ReduceOp::kMax).ok()) ++failures;
      if (max != static_cast<float>(world - 1)) ++failures;
    }
    if (!comm.barrier().ok()) ++failures;
    if (comm.stats()[CommKind::kAllGather].calls != 200) ++failures;
  });
  EXPECT_EQ(failures.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Worlds, ThreadComm, ::testing::Values(1, 2, 3, 4));

// duplicate(): a second group over the same ranks whose collectives another thread of each rank
// issues while the rank's own thread issues the original's (the CPU backend's comm stream and the
// engine's loss all-reduce): neither sees the other's calls. Worlds 2-4.
TEST(ThreadCommDuplicate, CollectivesOfBothGroupsRunSideBySide) {
  for (int world = 2; world <= 4; ++world) {
    ThreadCommunicator::run(world, [world](Communicator& comm) {
      auto dup = static_cast<ThreadCommunicator&>(comm).duplicate();
      ASSERT_TRUE(dup.ok()) << dup.status().to_string();
      EXPECT_EQ((*dup)->rank(), comm.rank());
      EXPECT_EQ((*dup)->world_size(), world);
      const float n = static_cast<float>(world);
      const float rank_sum = n * (n + 1) / 2;  // sum of rank + 1
      std::thread other([&] {
        for (int i = 0; i < 40; ++i) {
          float x = 10.0f * static_cast<float>(comm.rank() + 1);
          EXPECT_TRUE((*dup)->all_reduce(&x, 1, DType::kF32).ok());
          EXPECT_EQ(x, 10.0f * rank_sum);
        }
      });
      for (int i = 0; i < 40; ++i) {
        float y = static_cast<float>(comm.rank() + 1);
        EXPECT_TRUE(comm.all_reduce(&y, 1, DType::kF32).ok());
        EXPECT_EQ(y, rank_sum);
      }
      other.join();
      EXPECT_EQ((*dup)->stats()[CommKind::kAllReduce].calls, 40);
    });
  }
}

TEST(ThreadCommErrors, MismatchedCallsFailOnEveryRankNamingBoth) {
  std::atomic<int> named{0};
  ThreadCommunicator::run(2, [&](Communicator& comm) {
    float buf[4] = {};
    Status s = comm.rank() == 0 ? comm.all_reduce(buf, 4, DType::kF32)
                                : comm.all_reduce(buf, 3, DType::kF32);
    if (!s.ok() && s.message().find("rank 0 called all_reduce(4 x f32), rank 1 called "
                                    "all_reduce(3 x f32)") != std::string::npos) {
      ++named;
    }
  });
  EXPECT_EQ(named.load(), 2);
}

TEST(ThreadCommErrors, AMissingRankTimesOut) {
  auto comms = ThreadCommunicator::create_group(2, /*timeout_ms=*/50);
  Status s = comms[0]->barrier();
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("rank 0: collective #0 barrier"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace zero
