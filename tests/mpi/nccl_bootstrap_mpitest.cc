// The NCCL id exchange under mpirun (no GPU needed): every rank must hold rank 0's 128-byte id.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "comm/nccl_bootstrap.h"
#include "core/check.h"

namespace zero {
namespace {

MpiCommunicator* g_world = nullptr;  // set by main

TEST(NcclBootstrap, EveryRankHoldsRankZerosId) {
  auto id = exchange_nccl_id(*g_world);
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  static_assert(sizeof(ncclUniqueId) == 128);
  const ncclUniqueId zeros{};
  EXPECT_NE(std::memcmp(&*id, &zeros, sizeof(zeros)), 0) << "the id is all zeros";
  // Gather every rank's copy (bytes verbatim, 32 f32 elements each) and compare with rank 0's.
  std::vector<ncclUniqueId> all(g_world->world_size());
  ASSERT_TRUE(g_world->all_gather(&*id, all.data(), sizeof(ncclUniqueId) / 4, DType::kF32).ok());
  for (int r = 1; r < g_world->world_size(); ++r) {
    EXPECT_EQ(std::memcmp(&all[r], &all[0], sizeof(ncclUniqueId)), 0) << "rank " << r;
  }
  // A second exchange yields a fresh id (rank 0 calls ncclGetUniqueId again).
  auto second = exchange_nccl_id(*g_world);
  ASSERT_TRUE(second.ok());
  EXPECT_NE(std::memcmp(&*second, &*id, sizeof(ncclUniqueId)), 0);
}

}  // namespace
}  // namespace zero

int main(int argc, char** argv) {
  auto runtime = zero::MpiRuntime::create(&argc, &argv);
  ZERO_CHECK(runtime.ok(), runtime.status().to_string());
  ::testing::InitGoogleTest(&argc, argv);
  int rc = 0;
  {
    zero::MpiCommunicatorOptions options;
    options.timeout_ms = 60'000;
    auto world = zero::MpiCommunicator::create_world(**runtime, options);
    ZERO_CHECK(world.ok(), world.status().to_string());
    zero::g_world = world->get();
    if (zero::g_world->rank() != 0) GTEST_FLAG_SET(brief, true);
    rc = RUN_ALL_TESTS();
  }
  return rc;
}
