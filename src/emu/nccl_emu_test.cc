// NcclCommunicator (comm/nccl_communicator.cc, unchanged) on the CPU emulator's NCCL stand-in
// (shadow/nccl.h, docs/emu.md): ranks are threads, each on its own emulated device, bootstrapped
// over a ThreadCommunicator, whose results (comm/reduce16.h's oracle, in rank order) every
// collective the engine uses must reproduce bit for bit, for worlds 1-4 and fp32 / bf16 payloads.
// Also: a missing stream wait before a collective shows as stale data; a peer that never arrives
// is a deadline error, mismatched calls an error on every rank; bf16 sums round at every step.
// NcclCommunicator and its id bootstrap are zero_emu_cuda's objects (src/emu/CMakeLists.txt),
// linked, not compiled here again.
#include "emu/cuda_emu.h"
// The emulator header must come first; <nccl.h> is the stand-in (shadow/ is searched first).
#include <nccl.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "comm/nccl_bootstrap.h"
#include "comm/nccl_communicator.h"
#include "comm/reduce16.h"
#include "comm/thread_communicator.h"
#include "core/cuda/cuda_stream.h"
#include "core/dtype.h"

namespace zero {
namespace {

constexpr int64_t kTimeoutMs = 30000;

// Rank `rank`'s `numel` values as `dtype` bytes: integers in [-8, 8] when `exact` (their sums over
// four ranks round nowhere, in bf16 either), else normal(0, 3) values.
std::vector<std::byte> payload(int rank, size_t numel, DType dtype, bool exact, uint32_t salt = 0) {
  std::mt19937 rng(static_cast<uint32_t>(rank) * 7919u + static_cast<uint32_t>(numel) + salt);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int> small(-8, 8);
  std::vector<float> values(numel);
  for (float& v : values) v = exact ? static_cast<float>(small(rng)) : normal(rng);
  std::vector<std::byte> bytes(numel * dtype_bytes(dtype));
  convert_from_f32(values.data(), bytes.data(), dtype, numel);
  return bytes;
}

// Runs fn(threads, nccl) on every rank of a world of `world` threads: rank r on emulated device r,
// its NcclCommunicator bootstrapped over `threads` (a ThreadCommunicator, also the oracle).
void run_ranks(int world, const std::function<void(Communicator&, NcclCommunicator&)>& fn,
               int64_t timeout_ms = kTimeoutMs) {
  ThreadCommunicator::run(world, [&](Communicator& threads) {
    ASSERT_EQ(cudaSetDevice(threads.rank()), cudaSuccess);
    auto nccl = NcclCommunicator::create(threads, timeout_ms);
    ASSERT_TRUE(nccl.ok()) << nccl.status().to_string();
    EXPECT_EQ((*nccl)->rank(), threads.rank());
    EXPECT_EQ((*nccl)->world_size(), world);
    EXPECT_EQ((*nccl)->device(), threads.rank());
    fn(threads, **nccl);
  });
}

// A collective over one rank's buffer `buf` (its inputs and outputs at fixed offsets).
using Issue = std::function<CommHandle(Communicator& comm, std::byte* buf)>;

// Runs `issue` on this rank's copy of `bytes` with the ThreadCommunicator (host memory) and with
// the NcclCommunicator (emulated device memory, uploaded on its stream), and expects the same
// bytes after both.
void expect_same_bytes(Communicator& threads, NcclCommunicator& nccl,
                       const std::vector<std::byte>& bytes, const Issue& issue) {
  std::vector<std::byte> want = bytes;
  ASSERT_TRUE(issue(threads, want.data()).wait().ok());

  std::byte* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, bytes.size()), cudaSuccess);
  // Why on the comm stream: a collective's inputs must be ready on stream() (the contract).
  ASSERT_EQ(cudaMemcpyAsync(dev, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, nccl.stream()),
            cudaSuccess);
  const Status status = issue(nccl, dev).wait();
  EXPECT_TRUE(status.ok()) << status.to_string();
  std::vector<std::byte> got(bytes.size());
  ASSERT_EQ(cudaMemcpy(got.data(), dev, bytes.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaFree(dev), cudaSuccess);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0) << "rank " << nccl.rank();
}

using Param = std::tuple<int, DType>;  // world size, payload dtype

class NcclEmu : public ::testing::TestWithParam<Param> {
 protected:
  int world() const { return std::get<0>(GetParam()); }
  DType dtype() const { return std::get<1>(GetParam()); }
  size_t esize() const { return dtype_bytes(dtype()); }
  // Reductions of 16-bit payloads on exact values: NCCL rounds every step, the oracle once.
  bool exact_sums() const { return dtype() != DType::kF32; }
};

TEST_P(NcclEmu, AllReduceMatchesThreadCommunicator) {
  run_ranks(world(), [&](Communicator& threads, NcclCommunicator& nccl) {
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      for (const size_t numel : {size_t{1}, size_t{7}, size_t{1031}}) {
        SCOPED_TRACE(std::to_string(numel) + (op == ReduceOp::kSum ? " sum" : " max"));
        expect_same_bytes(threads, nccl, payload(threads.rank(), numel, dtype(), exact_sums()),
                          [&](Communicator& comm, std::byte* buf) {
                            return comm.all_reduce_async(buf, numel, dtype(), op);
                          });
      }
    }
  });
}

TEST_P(NcclEmu, ReduceScatterMatchesThreadCommunicator) {
  run_ranks(world(), [&](Communicator& threads, NcclCommunicator& nccl) {
    for (const size_t block : {size_t{1}, size_t{5}, size_t{257}}) {
      SCOPED_TRACE("block " + std::to_string(block));
      // buf = [in (world x block) | out (block)]
      const size_t in_numel = block * static_cast<size_t>(world());
      expect_same_bytes(
          threads, nccl, payload(threads.rank(), in_numel + block, dtype(), exact_sums()),
          [&](Communicator& comm, std::byte* buf) {
            return comm.reduce_scatter_async(buf, buf + in_numel * esize(), block, dtype());
          });
    }
  });
}

TEST_P(NcclEmu, AllGatherMatchesThreadCommunicator) {
  run_ranks(world(), [&](Communicator& threads, NcclCommunicator& nccl) {
    const size_t rank = static_cast<size_t>(threads.rank());
    for (const size_t block : {size_t{1}, size_t{5}, size_t{257}}) {
      SCOPED_TRACE("block " + std::to_string(block));
      const size_t out_numel = block * static_cast<size_t>(world());
      // Out of place, buf = [in (block) | out (world x block)]; in place, buf = out and the input
      // is this rank's own block of it (as ZeRO gathers its shards).
      expect_same_bytes(threads, nccl, payload(threads.rank(), block + out_numel, dtype(), false),
                        [&](Communicator& comm, std::byte* buf) {
                          return comm.all_gather_async(buf, buf + block * esize(), block, dtype());
                        });
      expect_same_bytes(threads, nccl, payload(threads.rank(), out_numel, dtype(), false),
                        [&](Communicator& comm, std::byte* buf) {
                          return comm.all_gather_async(buf + rank * block * esize(), buf, block,
                                                       dtype());
                        });
    }
  });
}

TEST_P(NcclEmu, BroadcastFromEveryRootMatchesThreadCommunicator) {
  run_ranks(world(), [&](Communicator& threads, NcclCommunicator& nccl) {
    for (int root = 0; root < world(); ++root) {
      for (const size_t numel : {size_t{1}, size_t{1031}}) {
        SCOPED_TRACE("root " + std::to_string(root) + " numel " + std::to_string(numel));
        expect_same_bytes(threads, nccl, payload(threads.rank(), numel, dtype(), false),
                          [&](Communicator& comm, std::byte* buf) {
                            return comm.broadcast_async(buf, numel, dtype(), root);
                          });
      }
    }
  });
}

// A step's worth of collectives issued back to back before any wait (they complete in issue
// order on the comm stream), then a barrier; the same bytes and the same counters as the oracle.
TEST_P(NcclEmu, BackToBackCollectivesThenBarrierMatchThreadCommunicator) {
  run_ranks(world(), [&](Communicator& threads, NcclCommunicator& nccl) {
    const size_t block = 37, w = static_cast<size_t>(world());
    const size_t rank = static_cast<size_t>(threads.rank());
    // buf = [grads (w x block) | shard (block) | params (w x block) | loss (1)]
    const size_t shard_at = w * block, params_at = shard_at + block,
                 loss_at = params_at + w * block;
    threads.reset_stats();
    nccl.reset_stats();
    expect_same_bytes(
        threads, nccl, payload(threads.rank(), loss_at + 1, dtype(), exact_sums(), 99),
        [&](Communicator& comm, std::byte* buf) {
          const DType t = dtype();
          const size_t e = esize();
          std::vector<CommHandle> handles;
          handles.push_back(comm.reduce_scatter_async(buf, buf + shard_at * e, block, t));
          handles.push_back(comm.all_gather_async(buf + (params_at + rank * block) * e,
                                                  buf + params_at * e, block, t));
          handles.push_back(comm.all_reduce_async(buf + loss_at * e, 1, t, ReduceOp::kSum));
          handles.push_back(comm.broadcast_async(buf, block, t, world() - 1));
          handles.push_back(comm.barrier_async());
          for (size_t i = 0; i + 1 < handles.size(); ++i) EXPECT_TRUE(handles[i].wait().ok());
          return handles.back();
        });
    EXPECT_EQ(nccl.stats().to_string(), threads.stats().to_string());
  });
}

INSTANTIATE_TEST_SUITE_P(WorldsDtypes, NcclEmu,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(DType::kF32, DType::kBF16)),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) + "_" +
                                  std::string(dtype_name(std::get<1>(info.param)));
                         });

// NCCL's 16-bit sums round after every step (rank order here): random bf16 values give that, bit
// for bit, and differ somewhere from the oracle's single rounding, within bf16's tolerance.
TEST(NcclEmuNumerics, Bf16SumsRoundAtEveryStep) {
  constexpr int kWorld = 4;
  constexpr size_t kNumel = 1031;
  std::vector<std::vector<std::byte>> inputs;
  std::vector<const void*> pointers;
  for (int r = 0; r < kWorld; ++r) inputs.push_back(payload(r, kNumel, DType::kBF16, false));
  for (const auto& in : inputs) pointers.push_back(in.data());
  std::vector<std::byte> once(kNumel * 2), stepwise = inputs[0];
  reduce_reference(pointers, once.data(), kNumel, DType::kBF16, ReduceOp::kSum);
  for (int r = 1; r < kWorld; ++r) {
    const std::vector<const void*> pair = {stepwise.data(), inputs[static_cast<size_t>(r)].data()};
    reduce_reference(pair, stepwise.data(), kNumel, DType::kBF16, ReduceOp::kSum);
  }
  ASSERT_NE(std::memcmp(once.data(), stepwise.data(), once.size()), 0);  // the shapes differ

  run_ranks(kWorld, [&](Communicator& threads, NcclCommunicator& nccl) {
    const auto& in = inputs[static_cast<size_t>(threads.rank())];
    std::byte* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, in.size()), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(dev, in.data(), in.size(), cudaMemcpyHostToDevice, nccl.stream()),
              cudaSuccess);
    EXPECT_TRUE(nccl.all_reduce(dev, kNumel, DType::kBF16).ok());
    std::vector<std::byte> got(in.size());
    ASSERT_EQ(cudaMemcpy(got.data(), dev, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaFree(dev), cudaSuccess);
    EXPECT_EQ(std::memcmp(got.data(), stepwise.data(), got.size()), 0);
    std::vector<float> got_f32(kNumel), once_f32(kNumel);
    convert_to_f32(got.data(), DType::kBF16, got_f32.data(), kNumel);
    convert_to_f32(once.data(), DType::kBF16, once_f32.data(), kNumel);
    for (size_t i = 0; i < kNumel; ++i) {
      // A few bf16 ulps of a sum of four normal(0, 3) values.
      EXPECT_NEAR(got_f32[i], once_f32[i], 0.125f + 0.02f * std::abs(once_f32[i])) << i;
    }
  });
}

// A host function that holds a stream until released (forces one interleaving, deterministically).
struct Gate {
  std::promise<void> opened;
  std::shared_future<void> open = opened.get_future().share();
  static void hold(void* gate) { static_cast<Gate*>(gate)->open.wait(); }
};

// Each rank's input is produced on another stream (a cudaMemcpyAsync held behind a gate). Without
// a stream wait the collective runs first and reduces stale data; with cudaStreamWaitEvent it
// waits for the producer and gives the sum. (NcclCommunicator's contract: inputs ready on
// stream(); the engine's GPU path must order its producers before every collective.)
void run_producer_then_all_reduce(bool wait_for_producer, std::atomic<int>& correct_ranks) {
  constexpr int kWorld = 2;
  constexpr size_t kNumel = 64;
  run_ranks(kWorld, [&](Communicator&, NcclCommunicator& nccl) {
    const std::vector<float> mine(kNumel, static_cast<float>(nccl.rank() + 1));
    float* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, kNumel * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(dev, 0, kNumel * sizeof(float), nccl.stream()), cudaSuccess);
    // Why: the producer's stream is not ordered after the memset (without this sync the zeros
    // could land after the produced values: the emulator's delays found it in this very test).
    ASSERT_EQ(cudaStreamSynchronize(nccl.stream()), cudaSuccess);
    {
      cuda::CudaStream producer;
      cuda::CudaEvent produced;
      Gate gate;
      ASSERT_EQ(cudaLaunchHostFunc(producer, &Gate::hold, &gate), cudaSuccess);
      ASSERT_EQ(cudaMemcpyAsync(dev, mine.data(), kNumel * sizeof(float), cudaMemcpyHostToDevice,
                                producer),
                cudaSuccess);
      produced.record(producer);
      if (wait_for_producer) produced.make_wait(nccl.stream());
      CommHandle handle = nccl.all_reduce_async(dev, kNumel, DType::kF32, ReduceOp::kSum);
      if (!wait_for_producer) {
        EXPECT_TRUE(handle.wait().ok());  // done while the producer is still held
      }
      gate.opened.set_value();
      EXPECT_TRUE(handle.wait().ok());
      ASSERT_EQ(cudaStreamSynchronize(producer), cudaSuccess);
    }
    std::vector<float> got(kNumel);
    ASSERT_EQ(cudaMemcpy(got.data(), dev, got.size() * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    ASSERT_EQ(cudaFree(dev), cudaSuccess);
    if (got == std::vector<float>(kNumel, 3.0f)) ++correct_ranks;  // 1 + 2
  });
}

TEST(NcclEmuStreams, CollectiveWithoutStreamWaitReducesStaleData) {
  std::atomic<int> correct_ranks{0};
  run_producer_then_all_reduce(/*wait_for_producer=*/false, correct_ranks);
  EXPECT_EQ(correct_ranks.load(), 0);
}

TEST(NcclEmuStreams, CollectiveAfterEventWaitSeesProducedData) {
  std::atomic<int> correct_ranks{0};
  run_producer_then_all_reduce(/*wait_for_producer=*/true, correct_ranks);
  EXPECT_EQ(correct_ranks.load(), 2);
}

// The stream-ordered form (issue_after, device/stream_collectives.h): each rank's own block is
// produced on another stream held behind a gate; the owner broadcasts of the unit, as one group,
// wait for the producer's event on the comm stream (no host sync): `done` stays pending while the
// producer is held, then the unit is every rank's block. Issued from a thread on another device
// (issue_after sets its own). Worlds 2-4.
TEST(NcclEmuStreams, GroupedBroadcastsWaitForTheReadyEventAndRecordDone) {
  constexpr size_t kBlock = 5;
  for (int world = 2; world <= 4; ++world) {
    SCOPED_TRACE(::testing::Message() << "world " << world);
    run_ranks(world, [&](Communicator& threads, NcclCommunicator& nccl) {
      const int rank = threads.rank();
      const size_t numel = kBlock * static_cast<size_t>(world);
      const std::vector<float> mine(kBlock, static_cast<float>(rank + 1));
      float* dev = nullptr;
      ASSERT_EQ(cudaMalloc(&dev, numel * sizeof(float)), cudaSuccess);
      ASSERT_EQ(cudaMemset(dev, 0, numel * sizeof(float)), cudaSuccess);
      // Why: the producer's non-blocking stream is not ordered after the legacy stream's memset.
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<CollectiveCall> calls;
      for (int r = 0; r < world; ++r) {
        float* block = dev + static_cast<size_t>(r) * kBlock;
        calls.push_back(
            {CommKind::kBroadcast, ReduceOp::kSum, DType::kF32, block, block, kBlock, r});
      }
      cuda::CudaEvent done;
      {
        cuda::CudaStream producer;
        cuda::CudaEvent ready;
        Gate gate;
        ASSERT_EQ(cudaLaunchHostFunc(producer, &Gate::hold, &gate), cudaSuccess);
        ASSERT_EQ(cudaMemcpyAsync(dev + static_cast<size_t>(rank) * kBlock, mine.data(),
                                  kBlock * sizeof(float), cudaMemcpyHostToDevice, producer),
                  cudaSuccess);
        ready.record(producer);
        EXPECT_EQ(cudaSetDevice(7 - rank), cudaSuccess);
        CommHandle handle = nccl.issue_after(ready.get(), calls, done.get());
        EXPECT_EQ(cudaEventQuery(done.get()), cudaErrorNotReady);  // the producer is held
        gate.opened.set_value();
        EXPECT_TRUE(handle.wait().ok());
        EXPECT_EQ(cudaEventSynchronize(done.get()), cudaSuccess);
        EXPECT_EQ(cudaSetDevice(rank), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(producer), cudaSuccess);
      }
      std::vector<float> got(numel), want;
      for (int r = 0; r < world; ++r) want.insert(want.end(), kBlock, static_cast<float>(r + 1));
      ASSERT_EQ(cudaMemcpy(got.data(), dev, numel * sizeof(float), cudaMemcpyDeviceToHost),
                cudaSuccess);
      ASSERT_EQ(cudaFree(dev), cudaSuccess);
      EXPECT_EQ(got, want);
      EXPECT_EQ(nccl.stats()[CommKind::kBroadcast].calls, world);
    });
  }
}

// A collective issued from a thread whose current device is another one (a comm or offload thread
// that never called cudaSetDevice): NcclCommunicator sets its own device before it creates and
// records the completion event, which the emulator, as CUDA, refuses on another device's stream
// (issue 11 item 8). World 2, fp32 all-reduce, each rank's thread on device 7 - rank.
TEST(NcclEmuDevices, CollectiveFromAThreadOnAnotherDevice) {
  run_ranks(2, [&](Communicator& threads, NcclCommunicator& nccl) {
    expect_same_bytes(threads, nccl, payload(threads.rank(), 7, DType::kF32, false),
                      [&](Communicator& comm, std::byte* buf) {
                        EXPECT_EQ(cudaSetDevice(7 - threads.rank()), cudaSuccess);
                        return comm.all_reduce_async(buf, 7, DType::kF32, ReduceOp::kSum);
                      });
  });
}

// Rank 1 never issues the all-reduce: rank 0's wait ends with kDeadlineExceeded after its timeout
// (not a hang), and its destructor aborts the communicator, which releases the stuck stream.
TEST(NcclEmuFaults, PeerThatNeverArrivesIsADeadlineError) {
  std::atomic<int> deadline_errors{0};
  ThreadCommunicator::run(2, [&](Communicator& threads) {
    ASSERT_EQ(cudaSetDevice(threads.rank()), cudaSuccess);
    float* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, sizeof(float)), cudaSuccess);
    {
      auto nccl = NcclCommunicator::create(threads, /*timeout_ms=*/200);
      ASSERT_TRUE(nccl.ok()) << nccl.status().to_string();
      if (threads.rank() == 0) {
        const Status status = (*nccl)->all_reduce(dev, 1, DType::kF32);
        if (status.code() == StatusCode::kDeadlineExceeded) ++deadline_errors;
        // The collective, its size and the communicator's, and what to look at.
        EXPECT_NE(status.to_string().find("rank 0 of 2 (GPU 0): all_reduce #0 of 4 bytes (f32) "
                                          "did not complete within 200 ms: a peer rank died"),
                  std::string::npos)
            << status.to_string();
      }
    }  // rank 0 aborts its communicator, rank 1 destroys its own
    ASSERT_EQ(cudaFree(dev), cudaSuccess);
  });
  EXPECT_EQ(deadline_errors.load(), 1);
}

// Issue 32 item 2: a collective that fails on one rank (the stand-in's injected broken connection
// on rank 1's second call, an all-gather) is an error on every rank well before the timeout, each
// naming the collective, its bytes and the communicator's size: rank 1 its own NCCL error, rank 0
// the remote error it sees once rank 1 aborts its communicator (as its destructor does after a
// failure; under mpirun the failing rank's MPI_Abort would end the job first).
TEST(NcclEmuFaults, AFailingCollectiveIsNamedOnEveryRankBeforeTheTimeout) {
  emu::nccl::set_collective_fault({.rank = 1, .skip = 1, .error = ncclSystemError});
  std::vector<std::string> errors(2);
  const auto t0 = std::chrono::steady_clock::now();
  ThreadCommunicator::run(2, [&](Communicator& threads) {
    ASSERT_EQ(cudaSetDevice(threads.rank()), cudaSuccess);
    float* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, 16 * sizeof(float)), cudaSuccess);
    {
      auto nccl = NcclCommunicator::create(threads, /*timeout_ms=*/60000);
      ASSERT_TRUE(nccl.ok()) << nccl.status().to_string();
      ASSERT_TRUE((*nccl)->all_reduce(dev, 4, DType::kF32).ok());
      const Status status = (*nccl)->all_gather(dev, dev + 8, 2, DType::kF32);
      EXPECT_FALSE(status.ok());
      errors[static_cast<size_t>(threads.rank())] = status.to_string();
    }  // rank 1 aborts its communicator (it failed), which releases rank 0 with a remote error
    ASSERT_EQ(cudaFree(dev), cudaSuccess);
  });
  emu::nccl::set_collective_fault({});
  const double waited_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(waited_ms, 20000.0);
  EXPECT_NE(errors[1].find("rank 1 of 2 (GPU 1): all_gather #1 of 16 bytes (f32): NCCL error "
                           "unhandled system error"),
            std::string::npos)
      << errors[1];
  EXPECT_NE(errors[0].find("rank 0 of 2 (GPU 0): all_gather #1 of 16 bytes (f32): NCCL error "
                           "remote process exited or there was a network error"),
            std::string::npos)
      << errors[0];
}

// Rank 1 exchanges the NCCL id but does not join ncclCommInitRank until rank 0 gave up: rank 0's
// setup ends with kDeadlineExceeded after its timeout, naming it and its GPU (not a hang in
// ncclCommInitRank, which has no timeout of its own). Rank 1 joining late completes the
// rendezvous with rank 0's abandoned call, whose thread aborts the communicator nobody waits for.
TEST(NcclEmuFaults, RankThatNeverJoinsSetupIsADeadlineError) {
  std::atomic<bool> rank0_gave_up{false};
  ThreadCommunicator::run(2, [&](Communicator& threads) {
    ASSERT_EQ(cudaSetDevice(threads.rank()), cudaSuccess);
    if (threads.rank() == 0) {
      const auto t0 = std::chrono::steady_clock::now();
      auto nccl = NcclCommunicator::create(threads, /*timeout_ms=*/200);
      const double waited_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      ASSERT_FALSE(nccl.ok());
      EXPECT_EQ(nccl.status().code(), StatusCode::kDeadlineExceeded);
      EXPECT_NE(nccl.status().to_string().find(
                    "rank 0 (GPU 0): NCCL communicator setup (ncclCommInitRank) did not finish "
                    "within 200 ms"),
                std::string::npos)
          << nccl.status().to_string();
      EXPECT_GE(waited_ms, 200.0);
      EXPECT_LT(waited_ms, 20000.0);
      rank0_gave_up = true;
    } else {
      StatusOr<ncclUniqueId> id = exchange_nccl_id(threads);
      ASSERT_TRUE(id.ok()) << id.status().to_string();
      while (!rank0_gave_up) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ncclComm_t comm = nullptr;
      ASSERT_EQ(ncclCommInitRank(&comm, 2, *id, 1), ncclSuccess);
      EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
    }
  });
}

// Ranks that call different collectives get NCCL's asynchronous error on every rank (here
// ncclInvalidUsage, reported at once) instead of a hang until the timeout.
TEST(NcclEmuFaults, MismatchedCallsFailOnEveryRank) {
  std::atomic<int> errors{0};
  ThreadCommunicator::run(2, [&](Communicator& threads) {
    ASSERT_EQ(cudaSetDevice(threads.rank()), cudaSuccess);
    float* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, 8 * sizeof(float)), cudaSuccess);
    {
      auto nccl = NcclCommunicator::create(threads, kTimeoutMs);
      ASSERT_TRUE(nccl.ok()) << nccl.status().to_string();
      const size_t numel = threads.rank() == 0 ? 5 : 8;
      const Status status = (*nccl)->all_reduce(dev, numel, DType::kF32);
      if (status.to_string().find("invalid usage") != std::string::npos) ++errors;
    }  // both abort their communicator: the streams stuck in the collective are released
    // Why only now: cudaFree waits for the device, whose comm stream was stuck until the abort.
    ASSERT_EQ(cudaFree(dev), cudaSuccess);
  });
  EXPECT_EQ(errors.load(), 2);
}

// A unique id names one communicator: ranks of two worlds never meet, and a rank index outside
// the world is NCCL's invalid argument.
TEST(NcclEmuInit, CommInitRankChecksItsArguments) {
  ncclUniqueId a{}, b{};
  ASSERT_EQ(ncclGetUniqueId(&a), ncclSuccess);
  ASSERT_EQ(ncclGetUniqueId(&b), ncclSuccess);
  EXPECT_NE(std::memcmp(&a, &b, sizeof(a)), 0);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, 2, a, 2), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(&comm, 1, b, 0), ncclSuccess);
  int count = 0;
  EXPECT_EQ(ncclCommCount(comm, &count), ncclSuccess);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_STREQ(ncclGetErrorString(ncclInvalidUsage),
               "invalid usage (run with NCCL_DEBUG=WARN for details)");
}

}  // namespace
}  // namespace zero
