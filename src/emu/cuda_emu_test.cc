// Tests of the CPU emulator itself (cuda_emu.h) with small kernels: the built-in indices, block
// barriers over static and dynamic shared memory, threads that return before a barrier, warp
// intrinsics (CUDA's width and out-of-segment rules), launch limits as launch errors, kernel bugs
// it must report, and CUDA's ordering rules between streams (the legacy default stream,
// non-blocking streams, events). The kernel tests run in both thread modes (fibers, OS threads).
#include "emu/cuda_emu.h"
// The emulator header must come first: it redefines the CUDA keywords below.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <semaphore>
#include <string>
#include <vector>

#include "core/cuda/launch.h"

namespace zero::emu {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// Runs each test's kernels in the parameter's thread mode (cuda_emu.h), then restores the mode.
// A sanitized build refuses fibers: those instances skip.
class CudaEmu : public ::testing::TestWithParam<ThreadMode> {
 protected:
  void SetUp() override {
    saved_mode_ = thread_mode();
    if (set_thread_mode(GetParam()) != GetParam()) GTEST_SKIP() << "fibers: not under sanitizers";
  }
  void TearDown() override {
    // Why: a queued grid reads the mode when it starts.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    set_thread_mode(saved_mode_);
  }

 private:
  ThreadMode saved_mode_ = ThreadMode::kFibers;
};

std::string mode_name(const ::testing::TestParamInfo<ThreadMode>& info) {
  return info.param == ThreadMode::kFibers ? "Fibers" : "OsThreads";
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaEmu,
                         ::testing::Values(ThreadMode::kFibers, ThreadMode::kOsThreads), mode_name);

__global__ void write_global_ids(int* out) {
  const unsigned tid_in_block = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned threads_per_block = blockDim.x * blockDim.y * blockDim.z;
  out[block * threads_per_block + tid_in_block] = static_cast<int>(block * 1000 + tid_in_block);
}

TEST_P(CudaEmu, BuiltInIndicesCoverTheGridOnce) {
  const dim3 grid(2, 3, 2), block(4, 2, 3);
  std::vector<int> out(12 * 24, -1);
  ZERO_LAUNCH(grid, block, 0, nullptr, write_global_ids)(out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the launch is queued on the legacy stream
  for (int b = 0; b < 12; ++b) {
    for (int t = 0; t < 24; ++t) EXPECT_EQ(out[b * 24 + t], b * 1000 + t);
  }
}

// out[t] = the value thread (n - 1 - t) wrote, through static shared memory.
__global__ void reverse_static(int* out) {
  __shared__ int s[256];
  const int t = threadIdx.x, n = blockDim.x;
  s[t] = t + 1000 * static_cast<int>(blockIdx.x);
  __syncthreads();
  out[blockIdx.x * n + t] = s[n - 1 - t];
}

__global__ void reverse_dynamic(int* out) {
  ZERO_EXTERN_SHARED(int, s);
  const int t = threadIdx.x, n = blockDim.x;
  s[t] = t + 1000 * static_cast<int>(blockIdx.x);
  __syncthreads();
  out[blockIdx.x * n + t] = s[n - 1 - t];
}

TEST_P(CudaEmu, SyncthreadsOrdersSharedMemory) {
  for (auto* kernel : {reverse_static, reverse_dynamic}) {
    std::vector<int> out(3 * 200);
    ZERO_LAUNCH(3, 200, 200 * sizeof(int), nullptr, kernel)(out.data());
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (int b = 0; b < 3; ++b) {
      for (int t = 0; t < 200; ++t) EXPECT_EQ(out[b * 200 + t], 199 - t + 1000 * b);
    }
  }
}

// One row of results per intrinsic, per thread (blockDim.x = 64: two warps).
__global__ void warp_intrinsics(int* out) {
  const int t = threadIdx.x, lane = t % 32, n = blockDim.x;
  int sum = lane;
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(kFullMask, sum, offset);
  out[0 * n + t] = sum;
  out[1 * n + t] = __shfl_down_sync(kFullMask, lane, 3);     // lane + 3, own past the end
  out[2 * n + t] = __shfl_up_sync(kFullMask, lane, 5, 16);   // within 16-lane segments
  out[3 * n + t] = __shfl_sync(kFullMask, lane * 10, 7, 8);  // lane 7 of each 8-lane segment
  out[4 * n + t] = __shfl_xor_sync(kFullMask, lane, 8, 8);   // earlier segment: read, later: own
  out[5 * n + t] = static_cast<int>(__ballot_sync(kFullMask, lane % 3 == 0) & 0xffu);
}

TEST_P(CudaEmu, WarpIntrinsicsFollowCudaSemantics) {
  const int n = 64;
  std::vector<int> out(6 * n);
  ZERO_LAUNCH(1, n, 0, nullptr, warp_intrinsics)(out.data());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int t = 0; t < n; ++t) {
    const int lane = t % 32;
    EXPECT_EQ(out[0 * n + t], 31 * 32 / 2);
    EXPECT_EQ(out[1 * n + t], lane + 3 < 32 ? lane + 3 : lane);
    EXPECT_EQ(out[2 * n + t], lane % 16 < 5 ? lane : lane - 5);
    EXPECT_EQ(out[3 * n + t], (lane / 8 * 8 + 7) * 10);
    EXPECT_EQ(out[4 * n + t], (lane / 8) % 2 == 1 ? lane - 8 : lane);
    EXPECT_EQ(out[5 * n + t], 0b01001001);
  }
}

// The threads of warp w call __syncthreads_count w % 4 times (round r counts the threads with
// t % 3 == 0), then lanes 16..31 return and lanes 0..15 shuffle under the half mask (those that
// exist): threads that returned drop out of the block's and the warp's barriers (sm_70+). (A warp's
// lanes take the same number of rounds: a lane in a shuffle while its warp's others wait at
// __syncthreads deadlocks.)
__global__ void count_then_exit(int* out) {
  const int t = threadIdx.x, lane = t % 32, rounds = t / 32 % 4;
  for (int r = 0; r < rounds; ++r) out[t * 5 + r] = __syncthreads_count(t % 3 == 0);
  if (lane >= 16) return;
  const int warp_lanes = min(32, static_cast<int>(blockDim.x) - (t - lane));  // even here
  const unsigned mask = 0x0000ffffu & (warp_lanes == 32 ? kFullMask : (1u << warp_lanes) - 1);
  out[t * 5 + 4] = __shfl_xor_sync(mask, lane, 1);
}

TEST_P(CudaEmu, ReturnedThreadsLeaveTheBarriers) {
  for (const int n : {32, 48, 256, 1000}) {  // 48, 1000: a 16-lane and an 8-lane last warp
    std::vector<int> out(n * 5, -1);
    ZERO_LAUNCH(2, n, 0, nullptr, count_then_exit)(out.data());
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (int t = 0; t < n; ++t) {
      for (int r = 0; r < t / 32 % 4; ++r) {
        int want = 0;  // the threads still calling in round r whose predicate holds
        for (int u = 0; u < n; ++u) want += u / 32 % 4 > r && u % 3 == 0;
        EXPECT_EQ(out[t * 5 + r], want) << "n " << n << " thread " << t << " round " << r;
      }
      EXPECT_EQ(out[t * 5 + 4], t % 32 < 16 ? (t % 32) ^ 1 : -1) << "n " << n << " thread " << t;
    }
  }
}

__global__ void noop() {}

TEST_P(CudaEmu, LaunchLimitsAreLaunchErrors) {
  ZERO_LAUNCH(1, 1025, 0, nullptr, noop)();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // read once
  ZERO_LAUNCH(dim3(1, 65536), 32, 0, nullptr, noop)();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  // Above 48 KiB of dynamic shared memory only after the kernel opts in.
  ZERO_LAUNCH(1, 32, 64 * 1024, nullptr, reverse_dynamic)(nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  ASSERT_EQ(
      cudaFuncSetAttribute(reverse_dynamic, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
      cudaSuccess);
  std::vector<int> out(32);
  ZERO_LAUNCH(1, 32, 64 * 1024, nullptr, reverse_dynamic)(out.data());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(out[0], 31);
  // Back to the default limit, so the test holds under --gtest_repeat.
  ASSERT_EQ(
      cudaFuncSetAttribute(reverse_dynamic, cudaFuncAttributeMaxDynamicSharedMemorySize, 48 * 1024),
      cudaSuccess);
}

// Lanes 16..31 return, then lanes 0..15 shuffle with the full mask: undefined on a GPU.
__global__ void shuffle_after_exit(int* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(kFullMask, static_cast<int>(threadIdx.x), 1);
}

#if defined(__SANITIZE_THREAD__)
#define ZERO_EMU_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ZERO_EMU_TEST_TSAN 1
#endif
#endif

// reverse_static with its __syncthreads() left out: each thread reads a slot another thread
// writes, with nothing ordering the two.
[[maybe_unused]] __global__ void reverse_without_barrier(int* out) {
  __shared__ int s[64];
  const int t = threadIdx.x, n = blockDim.x;
  s[t] = t;
  out[t] = s[n - 1 - t];
}

// The planted race: under ThreadSanitizer (the tsan preset, label tsan) a missing __syncthreads
// is a data race on shared memory, so TSan stops the launch with its exit code 66.
TEST(CudaEmuDeathTest, MissingSyncthreadsIsADataRaceUnderTsan) {
#if !defined(ZERO_EMU_TEST_TSAN)
  GTEST_SKIP() << "needs ThreadSanitizer (the tsan preset)";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // Why: the re-executed child must stop at the first report, whatever the caller's options.
  const char* tsan_options = std::getenv("TSAN_OPTIONS");
  const std::string options =
      std::string(tsan_options != nullptr ? tsan_options : "") + ":halt_on_error=1:exitcode=66";
  setenv("TSAN_OPTIONS", options.c_str(), /*overwrite=*/1);
  std::vector<int> out(64);
  // Why the sync: the launch is queued on the legacy stream; the child must run it before exiting.
  const auto launch_and_wait = [&] {
    set_thread_mode(ThreadMode::kOsThreads);  // TSan sees races between OS threads only
    ZERO_LAUNCH(1, 64, 0, nullptr, reverse_without_barrier)(out.data());
    cudaDeviceSynchronize();
  };
  EXPECT_EXIT(launch_and_wait(), ::testing::ExitedWithCode(66), "data race");
#endif
}

// Lanes 0..15 wait at __syncthreads, lanes 16..31 at __syncwarp: neither barrier can complete.
__global__ void divergent_barriers() {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncwarp();
  }
}

// Fibers see that no thread can go on and abort (OS threads would hang, as a GPU might).
TEST(CudaEmuDeathTest, DeadlockIsReportedWithFibers) {
  const ThreadMode saved = thread_mode();
  if (set_thread_mode(ThreadMode::kFibers) != ThreadMode::kFibers) {
    GTEST_SKIP() << "fibers: not under sanitizers";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto launch_and_wait = [] {
    ZERO_LAUNCH(1, 32, 0, nullptr, divergent_barriers)();
    cudaDeviceSynchronize();
  };
  EXPECT_DEATH(launch_and_wait(), "deadlock");
  set_thread_mode(saved);
}

class CudaEmuModesDeathTest : public CudaEmu {};
INSTANTIATE_TEST_SUITE_P(Modes, CudaEmuModesDeathTest,
                         ::testing::Values(ThreadMode::kFibers, ThreadMode::kOsThreads), mode_name);

TEST_P(CudaEmuModesDeathTest, ShuffleWithAnExitedLaneIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<int> out(32);
  const auto launch_and_wait = [&] {
    ZERO_LAUNCH(1, 32, 0, nullptr, shuffle_after_exit)(out.data());
    cudaDeviceSynchronize();
  };
  EXPECT_DEATH(launch_and_wait(), "names a lane that has exited");
}

// ---- Streams (stream_emu.h): CUDA's ordering rules between streams, each interleaving forced by
// a gate that holds the legacy default stream, so the outcomes do not depend on timing.

// A host function queued on a stream (cudaLaunchHostFunc) that holds it until open().
class Gate {
 public:
  void hold(cudaStream_t stream) {
    ASSERT_EQ(cudaLaunchHostFunc(stream, &Gate::wait_open, this), cudaSuccess);
  }
  void open() { opened_.release(); }

 private:
  static void wait_open(void* self) { static_cast<Gate*>(self)->opened_.acquire(); }
  std::binary_semaphore opened_{0};
};

__global__ void set_flag(int* flag) { *flag = 1; }
__global__ void copy_int(int* dst, const int* src) { *dst = *src; }

int read_back(const int* device_ptr) {
  int host = -1;
  EXPECT_EQ(cudaMemcpy(&host, device_ptr, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

// How the flag's zeroing on the legacy stream is ordered before the kernel that sets it.
enum class Order { kNone, kEvent, kBlockingStream };

// The H100 bug of issue 11 (DeviceArray zeroed its memory with cudaMemset on the legacy stream,
// the kernels ran on non-blocking streams): the memset waits behind the gate, the kernel runs and
// finishes, the gate opens, the memset lands, all before the device sync and the read.
int flag_after_zero_then_set(Order order) {
  int* flag = nullptr;
  EXPECT_EQ(cudaMalloc(&flag, sizeof(int)), cudaSuccess);
  cudaStream_t stream = nullptr;
  EXPECT_EQ(
      cudaStreamCreateWithFlags(
          &stream, order == Order::kBlockingStream ? cudaStreamDefault : cudaStreamNonBlocking),
      cudaSuccess);
  cudaEvent_t zeroed = nullptr;
  EXPECT_EQ(cudaEventCreateWithFlags(&zeroed, cudaEventDisableTiming), cudaSuccess);
  Gate gate;
  gate.hold(cudaStreamLegacy);
  EXPECT_EQ(cudaMemset(flag, 0, sizeof(int)), cudaSuccess);  // queued behind the gate
  if (order == Order::kEvent) {
    EXPECT_EQ(cudaEventRecord(zeroed, cudaStreamLegacy), cudaSuccess);
    EXPECT_EQ(cudaEventQuery(zeroed), cudaErrorNotReady);
    EXPECT_EQ(cudaStreamWaitEvent(stream, zeroed, 0), cudaSuccess);
  }
  ZERO_LAUNCH(1, 1, 0, stream, set_flag)(flag);
  if (order == Order::kNone) {
    // Nothing orders the kernel after the memset: it runs now, while the gate still holds.
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  } else {
    EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady);  // the kernel waits for the memset
  }
  gate.open();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const int got = read_back(flag);
  EXPECT_EQ(cudaEventDestroy(zeroed), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  EXPECT_EQ(cudaFree(flag), cudaSuccess);
  return got;
}

TEST(CudaEmuStreams, NonBlockingStreamDoesNotWaitForTheLegacyStream) {
  EXPECT_EQ(flag_after_zero_then_set(Order::kNone), 0);  // the kernel's flag is lost
}

TEST(CudaEmuStreams, EventWaitOrdersTheKernelAfterTheMemset) {
  EXPECT_EQ(flag_after_zero_then_set(Order::kEvent), 1);
}

TEST(CudaEmuStreams, BlockingStreamWaitsForTheLegacyStream) {
  EXPECT_EQ(flag_after_zero_then_set(Order::kBlockingStream), 1);
}

// A pageable host-to-device cudaMemcpy returns once the source is staged: the host may reuse it,
// and the device write lands when the legacy stream gets there (here after a non-blocking
// stream's kernel read the old value).
// Pinned host memory (cudaHostAlloc / cudaMallocHost): a device-to-host cudaMemcpyAsync lands in
// it in stream order, so a host function queued after the copy reads the copied value (the CUDA
// backend's sum of squares reports its result this way), and not before the stream gets there.
TEST(CudaEmuStreams, PinnedCopyLandsBeforeTheNextHostFunction) {
  int* value = nullptr;
  ASSERT_EQ(cudaMalloc(&value, sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemset(value, 0, sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  int* pinned = nullptr;
  int* pinned_too = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, sizeof(int), cudaHostAllocDefault), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&pinned_too, sizeof(int)), cudaSuccess);
  *pinned = -1;
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Gate gate;
  gate.hold(stream);
  ZERO_LAUNCH(1, 1, 0, stream, set_flag)(value);
  ASSERT_EQ(cudaMemcpyAsync(pinned, value, sizeof(int), cudaMemcpyDeviceToHost, stream),
            cudaSuccess);
  struct Seen {
    const int* pinned;
    int value = -2;
  } seen{pinned};
  ASSERT_EQ(
      cudaLaunchHostFunc(
          stream, [](void* p) { static_cast<Seen*>(p)->value = *static_cast<Seen*>(p)->pinned; },
          &seen),
      cudaSuccess);
  EXPECT_EQ(*pinned, -1);  // held: nothing has run
  gate.open();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(seen.value, 1);
  EXPECT_EQ(*pinned, 1);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(pinned_too), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  EXPECT_EQ(cudaFree(value), cudaSuccess);
}

TEST(CudaEmuStreams, PageableUploadReturnsBeforeItLands) {
  int *value = nullptr, *seen = nullptr;
  ASSERT_EQ(cudaMalloc(&value, sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&seen, sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemset(value, 0, sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaMemset(seen, 0xff, sizeof(int)), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Gate gate;
  gate.hold(cudaStreamLegacy);
  int host = 7;
  ASSERT_EQ(cudaMemcpy(value, &host, sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
  host = 8;  // staged already: the device gets 7
  ZERO_LAUNCH(1, 1, 0, stream, copy_int)(seen, value);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  gate.open();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(read_back(seen), 0);  // the kernel ran before the upload landed
  EXPECT_EQ(read_back(value), 7);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  ASSERT_EQ(cudaFree(value), cudaSuccess);
  ASSERT_EQ(cudaFree(seen), cudaSuccess);
}

}  // namespace
}  // namespace zero::emu
