// The device rules of runtime/device_model.h that need no device: which GPU a rank takes, and when
// the node's ranks share them (the transport then staged through host memory).
#include "runtime/device_model.h"

#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "comm/thread_communicator.h"

namespace zero::runtime {
namespace {

TEST(RankCudaDevice, OneGpuPerRankUnlessTheNodeHasFewer) {
  EXPECT_FALSE(ranks_share_a_gpu(4, 4));
  EXPECT_FALSE(ranks_share_a_gpu(2, 8));
  EXPECT_TRUE(ranks_share_a_gpu(3, 2));
  EXPECT_FALSE(ranks_share_a_gpu(4, 0));  // no GPU: nothing to share
  // Four ranks on one node (ThreadCommunicator: local rank = rank) over 8, 4, 3 and 1 GPUs.
  std::mutex mu;
  std::vector<std::vector<int>> got(4, std::vector<int>(4, -1));
  ThreadCommunicator::run(4, [&](Communicator& comm) {
    std::lock_guard<std::mutex> lock(mu);
    int i = 0;
    for (int count : {8, 4, 3, 1})
      got[static_cast<size_t>(i++)][comm.rank()] = rank_cuda_device(comm, count);
  });
  EXPECT_EQ(got[0], (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(got[1], (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(got[2], (std::vector<int>{0, 1, 2, 0}));  // as NCCL's bootstrap picks
  EXPECT_EQ(got[3], (std::vector<int>{0, 0, 0, 0}));
}

}  // namespace
}  // namespace zero::runtime
