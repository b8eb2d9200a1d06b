// Single-process tests: world-size-1 semantics of MpiCommunicator (an Open MPI singleton), byte
// accounting, the fp32-accumulate-then-round reference and the compute-thread rule.
#include "comm/communicator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "comm/reduce16.h"
#include "core/check.h"

namespace zero {
namespace {

// MPI is initialised once for the whole test binary and finalized after the last test.
class MpiEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    auto rt = MpiRuntime::create(nullptr, nullptr);
    ASSERT_TRUE(rt.ok()) << rt.status().to_string();
    runtime = std::move(rt).value();
  }
  void TearDown() override { runtime.reset(); }
  std::unique_ptr<MpiRuntime> runtime;
};
MpiEnvironment* const g_mpi = static_cast<MpiEnvironment*>(
    ::testing::AddGlobalTestEnvironment(new MpiEnvironment));  // NOLINT: test-only registration

std::unique_ptr<MpiCommunicator> make_world(MpiCommunicatorOptions options = {}) {
  auto comm = MpiCommunicator::create_world(*g_mpi->runtime, options);
  ZERO_CHECK(comm.ok(), comm.status().to_string());
  return std::move(comm).value();
}

TEST(ComputeThreads, SplitsCoresAmongLocalRanks) {
  EXPECT_EQ(compute_threads_for(16, 4, nullptr), 4);
  EXPECT_EQ(compute_threads_for(2, 4, nullptr), 1);
  EXPECT_EQ(compute_threads_for(7, 2, ""), 3);
  EXPECT_EQ(compute_threads_for(0, 0, nullptr), 1);
}

TEST(ComputeThreads, HonoursOmpNumThreads) {
  EXPECT_EQ(compute_threads_for(16, 4, "3"), 3);
  EXPECT_EQ(compute_threads_for(16, 4, "5,2"), 5);
  EXPECT_EQ(compute_threads_for(16, 4, "0"), 4);    // invalid: ignored
  EXPECT_EQ(compute_threads_for(16, 4, "abc"), 4);  // invalid: ignored
}

TEST(CommBytes, DefinitionPerKind) {
  EXPECT_EQ(comm_payload_bytes(CommKind::kAllReduce, 10, DType::kF32, 4), 40);
  EXPECT_EQ(comm_payload_bytes(CommKind::kReduceScatter, 10, DType::kBF16, 4), 80);
  EXPECT_EQ(comm_payload_bytes(CommKind::kAllGather, 3, DType::kF16, 3), 18);
  EXPECT_EQ(comm_payload_bytes(CommKind::kBroadcast, 7, DType::kF32, 8), 28);
  EXPECT_EQ(comm_payload_bytes(CommKind::kBarrier, 0, DType::kF32, 8), 0);
}

TEST(ReduceReference, Bf16SumsInFp32ThenRoundsOnce) {
  // 1 + 2^-8 + 2^-8: rounding after each addition would give 1 (ties to even) twice; the fp32 sum
  // 1 + 2^-7 is representable in bf16.
  std::vector<bf16> a{float_to_bf16(1.0f)}, b{float_to_bf16(0x1p-8f)}, c{float_to_bf16(0x1p-8f)};
  const void* inputs[] = {a.data(), b.data(), c.data()};
  bf16 out;
  reduce_reference(inputs, &out, 1, DType::kBF16, ReduceOp::kSum);
  EXPECT_EQ(bf16_to_float(out), 1.0f + 0x1p-7f);
  EXPECT_EQ(round_to_bf16(round_to_bf16(1.0f + 0x1p-8f) + 0x1p-8f), 1.0f);  // the per-hop answer
}

TEST(ReduceReference, F16SumsInFp32ThenRoundsOnce) {
  std::vector<f16> a{float_to_f16(2048.0f)}, b{float_to_f16(1.0f)}, c{float_to_f16(1.0f)};
  const void* inputs[] = {a.data(), b.data(), c.data()};
  f16 out;
  reduce_reference(inputs, &out, 1, DType::kF16, ReduceOp::kSum);
  EXPECT_EQ(f16_to_float(out), 2050.0f);
  // A final rounding still happens: 2048 + 1 (fp32 exact) rounds to even 2048 in f16.
  const void* two[] = {a.data(), b.data()};
  reduce_reference(two, &out, 1, DType::kF16, ReduceOp::kSum);
  EXPECT_EQ(f16_to_float(out), 2048.0f);
}

TEST(ReduceReference, Max) {
  std::vector<float> a{1, -5, 3}, b{2, -7, 3};
  const void* inputs[] = {a.data(), b.data()};
  std::vector<float> out(3);
  reduce_reference(inputs, out.data(), 3, DType::kF32, ReduceOp::kMax);
  EXPECT_EQ(out, (std::vector<float>{2, -5, 3}));
}

TEST(MpiCommunicatorSingleton, WorldOfOne) {
  auto comm = make_world();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world_size(), 1);
  EXPECT_EQ(comm->local_rank(), 0);
  EXPECT_EQ(comm->local_world_size(), 1);
  EXPECT_EQ(comm->backend_name(), "mpi");
  EXPECT_GE(default_compute_threads(*comm), 1);
}

TEST(MpiCommunicatorSingleton, CollectivesAreIdentities) {
  auto comm = make_world();
  std::vector<float> buf{1.5f, -2.0f, 3.25f};
  ASSERT_TRUE(comm->all_reduce(buf.data(), buf.size(), DType::kF32).ok());
  EXPECT_EQ(buf, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  ASSERT_TRUE(comm->all_reduce(buf.data(), buf.size(), DType::kF32, ReduceOp::kMax).ok());
  EXPECT_EQ(buf, (std::vector<float>{1.5f, -2.0f, 3.25f}));

  std::vector<bf16> h(5);
  for (int i = 0; i < 5; ++i) h[i] = float_to_bf16(0.1f * i);
  std::vector<bf16> h0 = h;
  ASSERT_TRUE(comm->all_reduce(h.data(), h.size(), DType::kBF16).ok());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(h[i].bits, h0[i].bits);

  std::vector<float> rs_out(3, 0.0f);
  ASSERT_TRUE(comm->reduce_scatter(buf.data(), rs_out.data(), 3, DType::kF32).ok());
  EXPECT_EQ(rs_out, buf);

  std::vector<f16> ag_in{float_to_f16(7.0f)}, ag_out(1);
  ASSERT_TRUE(comm->all_gather(ag_in.data(), ag_out.data(), 1, DType::kF16).ok());
  EXPECT_EQ(ag_out[0].bits, ag_in[0].bits);
  ASSERT_TRUE(comm->all_gather(ag_out.data(), ag_out.data(), 1, DType::kF16).ok());  // in place
  EXPECT_EQ(ag_out[0].bits, ag_in[0].bits);

  ASSERT_TRUE(comm->broadcast(buf.data(), buf.size(), DType::kF32, 0).ok());
  EXPECT_EQ(buf, (std::vector<float>{1.5f, -2.0f, 3.25f}));
  EXPECT_TRUE(comm->barrier().ok());
  // Zero-sized collectives are legal no-ops.
  EXPECT_TRUE(comm->all_reduce(nullptr, 0, DType::kF32).ok());
}

TEST(MpiCommunicatorSingleton, StatsCountPayloadBytes) {
  auto comm = make_world();
  std::vector<float> buf(10, 1.0f), out(10);
  ASSERT_TRUE(comm->all_reduce(buf.data(), 10, DType::kF32).ok());
  ASSERT_TRUE(comm->all_reduce(buf.data(), 4, DType::kBF16).ok());
  ASSERT_TRUE(comm->reduce_scatter(buf.data(), out.data(), 10, DType::kF32).ok());
  ASSERT_TRUE(comm->all_gather(buf.data(), out.data(), 5, DType::kF16).ok());
  ASSERT_TRUE(comm->broadcast(buf.data(), 3, DType::kF32, 0).ok());
  ASSERT_TRUE(comm->barrier().ok());
  CommStats s = comm->stats();
  EXPECT_EQ(s[CommKind::kAllReduce].calls, 2);
  EXPECT_EQ(s[CommKind::kAllReduce].bytes, 40 + 8);
  EXPECT_EQ(s[CommKind::kReduceScatter].bytes, 40);
  EXPECT_EQ(s[CommKind::kAllGather].bytes, 10);
  EXPECT_EQ(s[CommKind::kBroadcast].bytes, 12);
  EXPECT_EQ(s[CommKind::kBarrier].calls, 1);
  EXPECT_EQ(s[CommKind::kBarrier].bytes, 0);
  EXPECT_EQ(s.total_calls(), 6);
  EXPECT_EQ(s.total_bytes(), 110);
  EXPECT_NE(s.to_string().find("reduce_scatter 1 calls 40 B"), std::string::npos);
  comm->reset_stats();
  EXPECT_EQ(comm->stats().total_calls(), 0);
  EXPECT_EQ(comm->stats().total_bytes(), 0);
}

TEST(MpiCommunicatorSingleton, AsyncCompletesInIssueOrder) {
  auto comm = make_world();
  std::vector<float> a(1000, 1.0f), b(1000, 2.0f);
  std::vector<CommHandle> handles;
  for (int i = 0; i < 20; ++i) {
    handles.push_back(comm->all_reduce_async(a.data(), a.size(), DType::kF32, ReduceOp::kSum));
    handles.push_back(comm->broadcast_async(b.data(), b.size(), DType::kF32, 0));
  }
  // FIFO: once the last one is done, all earlier ones are too.
  ASSERT_TRUE(handles.back().wait().ok());
  for (auto& h : handles) EXPECT_TRUE(h.done());
  for (auto& h : handles) EXPECT_TRUE(h.wait().ok());
  CommHandle empty;
  EXPECT_TRUE(empty.done());
  EXPECT_TRUE(empty.wait().ok());
}

TEST(MpiCommunicatorSingleton, ArgumentErrors) {
  auto comm = make_world();
  float x = 0;
  Status s = comm->broadcast(&x, 1, DType::kF32, 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("root 1"), std::string::npos);
  EXPECT_EQ(comm->all_reduce(nullptr, 3, DType::kF32).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(comm->stats().total_calls(), 0);  // rejected calls are not counted
}

TEST(MpiCommunicatorSingleton, TimeoutConfiguration) {
  MpiCommunicatorOptions options;
  options.timeout_ms = 1234;
  auto comm = make_world(options);
  EXPECT_EQ(comm->timeout_ms(), 1234);
  comm->set_timeout_ms(99);
  EXPECT_EQ(comm->timeout_ms(), 99);
  comm.reset();
  setenv("ZERO_COMM_TIMEOUT_MS", "4567", 1);
  EXPECT_EQ(make_world()->timeout_ms(), 4567);
  unsetenv("ZERO_COMM_TIMEOUT_MS");
  EXPECT_EQ(make_world()->timeout_ms(), kDefaultCommTimeoutMs);
}

TEST(MpiCommunicatorSingleton, SeveralCommunicatorsCoexist) {
  if (!g_mpi->runtime->thread_multiple()) GTEST_SKIP() << "MPI without MPI_THREAD_MULTIPLE";
  auto a = make_world();
  auto b = make_world();
  std::vector<float> x(17, 1.0f);
  EXPECT_TRUE(a->all_reduce(x.data(), x.size(), DType::kF32).ok());
  EXPECT_TRUE(b->all_reduce(x.data(), x.size(), DType::kF32).ok());
}

}  // namespace
}  // namespace zero
