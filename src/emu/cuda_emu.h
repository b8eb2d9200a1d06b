// CPU emulator for the device side of the project's CUDA sources (docs/emu.md): included before a
// .cu file compiled as plain C++20 (g++, -pthread, the toolkit's headers for their host-side
// bf16 / fp16), it runs each launch with every CUDA thread of a block as a fiber (fiber_emu.h) or
// a std::thread, so CI on a machine without a GPU checks the kernels' indexing, bounds and
// synchronisation against the CPU twins; ASan sees out-of-bounds device accesses (device memory is
// host memory) and TSan sees a missing __syncthreads as a data race on shared memory.
//
// Model: a launch is queued on its stream, and each stream is an in-order queue with its own host
// thread (stream_emu.h); grids still run one at a time, whatever the stream (so streams order work
// but do not overlap it). The blocks of a grid run one after another. The threads of a block run
// either as fibers on the launch's host thread, switched round robin at every barrier (the
// default: no futex, no OS scheduling), or concurrently on a pool of host threads (under TSan and
// ASan, or ZERO_EMU_THREADS=os: TSan sees only OS threads' races). __syncthreads is a barrier over
// the block, warp intrinsics an exchange through the warp's barrier over its live lanes. A thread
// that returns drops out of both barriers (sm_70+ semantics).
// Static __shared__ arrays become function-local statics (one block runs at a time, so that is the
// block's shared memory); dynamic shared memory (ZERO_EXTERN_SHARED) is per block and starts as
// garbage. Launch limits are sm_90's; a bad configuration is a launch error for cudaGetLastError.
// REQUIRES of kernels beyond CUDA's own: every live lane of a warp takes part in each warp
// intrinsic (a shuffle under a partial mask while other lanes do something else would hang).
#pragma once

#define ZERO_CUDA_EMU 1

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <semaphore>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

// A block's CUDA threads as fibers (the default thread mode).
#include "emu/fiber_emu.h"
// The runtime calls the launchers make (device memory is host memory here; streams, events).
#include "emu/runtime_emu.h"  // IWYU pragma: export

namespace zero::emu {

inline constexpr int kWarpSize = 32;

// A bug in a kernel (a shuffle reading an exited lane, a lane outside its own mask): abort with
// the reason, as compute-sanitizer would report it.
[[noreturn]] inline void kernel_bug(const char* what, int lane) {
  std::fprintf(stderr, "zero emu: kernel bug: %s (lane %d)\n", what, lane);
  std::fflush(stderr);
  std::abort();
}

// How the CUDA threads of a block run (docs/emu.md): fibers on the launch's host thread, or one
// host thread each. TSan sees races only between OS threads and ASan does not follow hand-made
// stack switches, so sanitized builds run OS threads.
enum class ThreadMode { kFibers, kOsThreads };

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define ZERO_EMU_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define ZERO_EMU_SANITIZED 1
#endif
#endif

// The mode ZERO_EMU_THREADS=fibers|os asks for: fibers by default, OS threads in a sanitized build
// (which refuses fibers).
inline ThreadMode thread_mode_from_env() {
#if defined(ZERO_EMU_SANITIZED)
  constexpr ThreadMode kDefault = ThreadMode::kOsThreads;
#else
  constexpr ThreadMode kDefault = ThreadMode::kFibers;
#endif
  const char* env = std::getenv("ZERO_EMU_THREADS");
  if (env == nullptr || *env == '\0') return kDefault;
  if (std::strcmp(env, "os") == 0) return ThreadMode::kOsThreads;
  if (std::strcmp(env, "fibers") == 0) {
#if defined(ZERO_EMU_SANITIZED)
    std::fprintf(stderr,
                 "zero emu: ZERO_EMU_THREADS=fibers ignored in a sanitized build (OS threads)\n");
    return ThreadMode::kOsThreads;
#else
    return ThreadMode::kFibers;
#endif
  }
  std::fprintf(stderr, "zero emu: ZERO_EMU_THREADS=%s: expected 'fibers' or 'os'\n", env);
  std::exit(2);
}

inline std::atomic<ThreadMode>& thread_mode_setting() {
  static std::atomic<ThreadMode> mode{thread_mode_from_env()};
  return mode;
}

// The mode of the next grid to start (read by each grid as it starts on its stream).
inline ThreadMode thread_mode() { return thread_mode_setting().load(std::memory_order_relaxed); }

// For tests that run their kernels in both modes: sets the mode of grids that start from now on
// (queued ones included). Fibers are refused in a sanitized build; returns the mode now in force.
inline ThreadMode set_thread_mode(ThreadMode mode) {
#if defined(ZERO_EMU_SANITIZED)
  mode = ThreadMode::kOsThreads;
#endif
  thread_mode_setting().store(mode, std::memory_order_relaxed);
  return mode;
}

// A barrier over fibers of one host thread: arrive, then yield to the other fibers until the last
// expected member arrives (or drops out). `on_complete` runs once per phase, in the fiber that
// completes it, before any waiting member resumes.
class FiberBarrier {
 public:
  explicit FiberBarrier(int expected) : expected_(expected) {}

  uint64_t generation() const { return generation_; }

  template <typename OnComplete>
  void arrive_and_wait(OnComplete&& on_complete);
  void arrive_and_wait() {
    arrive_and_wait([] {});
  }

  template <typename OnComplete>
  void arrive_and_drop(OnComplete&& on_complete) {
    --expected_;
    if (arrived_ > 0 && arrived_ == expected_) complete(on_complete);
  }
  void arrive_and_drop() {
    arrive_and_drop([] {});
  }

 private:
  template <typename OnComplete>
  void complete(OnComplete& on_complete) {
    on_complete();
    arrived_ = 0;
    ++generation_;
  }

  int expected_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
};

// One warp: its live lanes meet at its barrier for every warp intrinsic.
class Warp {
 public:
  Warp(int num_lanes, ThreadMode mode)
      : mode_(mode),
        barrier_(num_lanes),
        fiber_barrier_(num_lanes),
        exited_lanes_(num_lanes == kWarpSize ? 0u : ~((1u << num_lanes) - 1u)) {}

  // Every live lane publishes `bits`; returns all 32 slots (exited lanes' slots are stale).
  // REQUIRES: lane is in mask, and every lane of mask is live.
  std::array<uint64_t, kWarpSize> exchange(unsigned mask, int lane, uint64_t bits) {
    if ((mask & (1u << lane)) == 0)
      kernel_bug("warp intrinsic called by a lane not in its mask", lane);
    if (mode_ == ThreadMode::kFibers) return exchange_fibers(mask, lane, bits);
    slots_[lane] = bits;
    // Why: every live lane has written its slot before any reads (and the exited set is final).
    barrier_.arrive_and_wait();
    if ((mask & exited_lanes_.load(std::memory_order_relaxed)) != 0) {
      kernel_bug("warp intrinsic's mask names a lane that has exited or does not exist", lane);
    }
    const std::array<uint64_t, kWarpSize> slots = slots_;
    // Why: nobody overwrites a slot for the next intrinsic before every lane has read this one.
    barrier_.arrive_and_wait();
    return slots;
  }

  void exit(int lane) {
    exited_lanes_.fetch_or(1u << lane, std::memory_order_relaxed);
    if (mode_ == ThreadMode::kFibers) {
      fiber_barrier_.arrive_and_drop([this] { snapshot_exited_lanes(); });
    } else {
      barrier_.arrive_and_drop();
    }
  }

 private:
  // One barrier phase per intrinsic: slots alternate between two banks by phase, so no lane
  // overwrites a slot for phase g + 2 before every lane has read phase g (it would have to pass
  // phase g + 1, which every live lane joins after reading g). The exited set is snapshotted when
  // a phase completes: a lane that returns after it does not make the phase's mask check fail.
  std::array<uint64_t, kWarpSize> exchange_fibers(unsigned mask, int lane, uint64_t bits) {
    const int bank = static_cast<int>(fiber_barrier_.generation() & 1);
    fiber_slots_[bank][lane] = bits;
    fiber_barrier_.arrive_and_wait([this] { snapshot_exited_lanes(); });
    if ((mask & exited_at_phase_end_[bank]) != 0) {
      kernel_bug("warp intrinsic's mask names a lane that has exited or does not exist", lane);
    }
    return fiber_slots_[bank];
  }

  void snapshot_exited_lanes() {
    exited_at_phase_end_[fiber_barrier_.generation() & 1] =
        exited_lanes_.load(std::memory_order_relaxed);
  }

  ThreadMode mode_;
  std::barrier<> barrier_;  // OS threads
  std::array<uint64_t, kWarpSize> slots_{};
  FiberBarrier fiber_barrier_;  // fibers
  std::array<std::array<uint64_t, kWarpSize>, 2> fiber_slots_{};
  std::array<uint32_t, 2> exited_at_phase_end_{};
  std::atomic<uint32_t> exited_lanes_;
};

// One block: its threads, warps and dynamic shared memory.
struct Block {
  Block(int num_threads, size_t dynamic_shared_bytes, ThreadMode thread_mode)
      : mode(thread_mode),
        barrier(num_threads),
        fiber_barrier(num_threads),
        dynamic_shared((dynamic_shared_bytes + 15) / 16) {
    for (auto& chunk : dynamic_shared) std::memset(chunk.bytes, 0xA5, sizeof(chunk.bytes));
    for (int first = 0; first < num_threads; first += kWarpSize) {
      warps.push_back(std::make_unique<Warp>(std::min(kWarpSize, num_threads - first), mode));
    }
  }
  struct alignas(16) Chunk {
    unsigned char bytes[16];
  };
  // __syncthreads over the block's live threads.
  void sync() {
    if (mode == ThreadMode::kFibers) {
      fiber_barrier.arrive_and_wait();
    } else {
      barrier.arrive_and_wait();
    }
  }
  // A returning thread drops out of the block's barrier.
  void exit() {
    if (mode == ThreadMode::kFibers) {
      fiber_barrier.arrive_and_drop();
    } else {
      barrier.arrive_and_drop();
    }
  }
  ThreadMode mode;
  std::barrier<> barrier;      // OS threads
  FiberBarrier fiber_barrier;  // fibers
  // __syncthreads_count's tallies, one per call round mod 3: round r adds to slot r % 3 and clears
  // slot (r + 1) % 3, whose last readers (round r - 2) all finished before round r - 1's barrier.
  std::array<std::atomic<int>, 3> sync_counts{};
  std::vector<std::unique_ptr<Warp>> warps;
  std::vector<Chunk> dynamic_shared;  // garbage at the start, as on a GPU
};

// What a CUDA thread knows about itself, on its own stack: the built-in variables are per thread.
struct ThreadContext {
  Block* block = nullptr;
  int linear_tid = 0;
  uint3 thread_idx{}, block_idx{};
  dim3 block_dim, grid_dim;
  int sync_count_round = 0;  // how many __syncthreads_{count,and,or} this thread has called
  int lane() const { return linear_tid % kWarpSize; }
  Warp& warp() const { return *block->warps[linear_tid / kWarpSize]; }
};
// The running CUDA thread's context: set by each pool worker, and by each fiber whenever it
// resumes (fibers share their host thread's variable; see FiberBarrier::arrive_and_wait).
inline thread_local ThreadContext* t_cuda_thread = nullptr;

template <typename OnComplete>
void FiberBarrier::arrive_and_wait(OnComplete&& on_complete) {
  const uint64_t generation = generation_;
  if (++arrived_ == expected_) {
    complete(on_complete);
    return;
  }
  ThreadContext* const self = t_cuda_thread;
  FiberPool::yield_until_changed(&generation_, generation);
  // Why: the fibers that ran meanwhile pointed the host thread's variable at their own contexts.
  t_cuda_thread = self;
}

inline cudaError_t get_last_error() {
  const cudaError_t err = t_last_error;
  t_last_error = cudaSuccess;
  return err;
}

inline const char* error_string(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error (emulator)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument (emulator)";
    case cudaErrorInvalidValue: return "invalid argument (emulator)";
    case cudaErrorMemoryAllocation: return "out of memory (emulator)";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version (emulator)";
    case cudaErrorDevicesUnavailable:
      return "CUDA-capable device(s) is/are busy or unavailable (emulator)";
    case cudaErrorNoKernelImageForDevice:
      return "no kernel image is available for execution on the device (emulator)";
    default: return "error (emulator)";
  }
}

// Dynamic shared-memory opt-ins (cudaFuncSetAttribute) by kernel: device-wide state on a GPU too.
inline std::map<const void*, int>& max_dynamic_shared_bytes() {
  static std::map<const void*, int> opt_ins;
  return opt_ins;
}

inline cudaError_t func_set_attribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > 227 * 1024) return t_last_error = cudaErrorInvalidValue;
    max_dynamic_shared_bytes()[kernel] = value;
  }
  return cudaSuccess;
}

// Why a launch would fail on sm_90, or nullptr.
inline const char* launch_config_error(const void* kernel, dim3 grid, dim3 block,
                                       size_t smem_bytes) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > 1024) return "block has 0 or more than 1024 threads";
  if (block.x > 1024 || block.y > 1024 || block.z > 64) return "blockDim above (1024, 1024, 64)";
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return "empty grid";
  if (grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
    return "gridDim above (2^31-1, 65535, 65535)";
  }
  const auto& opt_ins = max_dynamic_shared_bytes();
  const auto it = opt_ins.find(kernel);
  const size_t limit = it != opt_ins.end() ? static_cast<size_t>(it->second) : 48 * 1024;
  if (smem_bytes > limit)
    return "dynamic shared memory above the kernel's limit (48 KiB or opt-in)";
  return nullptr;
}

// The host threads that play a block's CUDA threads, started once and reused by every block of
// every launch (starting 256 threads per block cost more than most kernels here). Worker i runs
// CUDA thread i; each has its own semaphore, so a 32-thread block wakes 32 workers.
// REQUIRES: one run() at a time (launch() holds its mutex).
class ThreadPool {
 public:
  // Runs body(0) ... body(num_threads - 1) concurrently, one per worker; returns when all have.
  template <typename Body>
  void run(int num_threads, Body&& body) {
    while (static_cast<int>(workers_.size()) < num_threads) {
      workers_.push_back(std::make_unique<Worker>());
      Worker* w = workers_.back().get();
      const int index = static_cast<int>(workers_.size()) - 1;
      w->thread = std::thread([this, w, index] { serve(*w, index); });
      w->thread.detach();  // lives as long as the process: nothing to join at exit
    }
    body_ = [&body](int tid) { body(tid); };
    remaining_.store(num_threads, std::memory_order_relaxed);
    for (int i = 0; i < num_threads; ++i) workers_[i]->start.release();
    // Why: the block is done (and its state may be destroyed) only when every worker has returned.
    done_.acquire();
  }

 private:
  struct Worker {
    std::binary_semaphore start{0};
    std::thread thread;
  };

  void serve(Worker& w, int index) {
    for (;;) {
      w.start.acquire();
      body_(index);
      if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_.release();
    }
  }

  std::vector<std::unique_ptr<Worker>> workers_;
  std::function<void(int)> body_;
  std::atomic<int> remaining_{0};
  std::binary_semaphore done_{0};
};

inline ThreadPool& thread_pool() {
  static ThreadPool* pool = new ThreadPool;  // never destroyed: its workers never exit
  return *pool;
}

inline FiberPool& fiber_pool() {
  static FiberPool* pool = new FiberPool;  // never destroyed: launches may run at exit
  return *pool;
}

inline std::mutex& launch_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Runs kernel(args...) over grid x block on the calling thread (a stream's worker): the blocks
// one after another, each block's threads as fibers on this thread or on the thread pool.
template <typename... KArgs>
void run_grid(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem_bytes,
              const std::tuple<std::decay_t<KArgs>...>& params) {
  // Why: static __shared__ arrays are shared by all launches of a kernel, and the pools run one
  // block at a time: one launch at a time, whatever the kernel and the stream.
  const std::lock_guard<std::mutex> lock(launch_mutex());
  const ThreadMode mode = thread_mode();
  const int num_threads = static_cast<int>(block.x * block.y * block.z);
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        Block state(num_threads, smem_bytes, mode);
        auto body = [&](int tid) {
          ThreadContext self;
          self.block = &state;
          self.linear_tid = tid;
          self.thread_idx = {tid % block.x, (tid / block.x) % block.y, tid / (block.x * block.y)};
          self.block_idx = {bx, by, bz};
          self.block_dim = block;
          self.grid_dim = grid;
          t_cuda_thread = &self;
          auto args = params;  // by value, as kernel parameters are
          std::apply(kernel, args);
          self.warp().exit(self.lane());
          state.exit();
          t_cuda_thread = nullptr;
        };
        if (mode == ThreadMode::kFibers) {
          fiber_pool().run(num_threads, body,
                           "deadlock: every live thread of a block waits at a __syncthreads or "
                           "warp intrinsic that not all live threads reach");
        } else {
          thread_pool().run(num_threads, body);
        }
      }
    }
  }
}

// Launches kernel(args...) over grid x block on `stream`: a bad configuration is a launch error
// at once (as on a GPU); otherwise the grid is queued and runs when the stream gets there.
template <typename... KArgs>
void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
            std::tuple<std::decay_t<KArgs>...> params) {
  if (const char* why =
          launch_config_error(reinterpret_cast<const void*>(kernel), grid, block, smem_bytes)) {
    std::fprintf(stderr, "zero emu: launch rejected: %s\n", why);
    t_last_error = cudaErrorInvalidConfiguration;
    return;
  }
  stream_of(stream).enqueue([kernel, grid, block, smem_bytes, params = std::move(params)] {
    run_grid(kernel, grid, block, smem_bytes, params);
  });
}

// ZERO_LAUNCH(grid, block, smem, stream, kernel)(args...) under the emulator (core/cuda/launch.h).
template <typename... KArgs>
class Launcher {
 public:
  Launcher(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream)
      : kernel_(kernel), grid_(grid), block_(block), smem_bytes_(smem_bytes), stream_(stream) {}

  template <typename... Args>
  void operator()(Args&&... args) const {
    static_assert(sizeof...(Args) == sizeof...(KArgs), "kernel argument count");
    launch(kernel_, grid_, block_, smem_bytes_, stream_,
           std::tuple<std::decay_t<KArgs>...>(std::forward<Args>(args)...));
  }

 private:
  void (*kernel_)(KArgs...);
  dim3 grid_, block_;
  size_t smem_bytes_;
  cudaStream_t stream_;
};

template <typename T>
T* dynamic_shared() {
  return reinterpret_cast<T*>(t_cuda_thread->block->dynamic_shared.data());
}

template <typename T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}

template <typename T>
T from_bits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

// Lane `src_lane`'s v, or the caller's own v when src_lane < 0 (outside its width segment).
template <typename T>
T shuffle(unsigned mask, T v, int src_lane) {
  const ThreadContext& self = *t_cuda_thread;
  const auto slots = self.warp().exchange(mask, self.lane(), to_bits(v));
  if (src_lane < 0) return v;
  if ((mask & (1u << src_lane)) == 0)
    kernel_bug("shuffle reads a lane outside its mask", self.lane());
  return from_bits<T>(slots[src_lane]);
}

// Every lane of the full warp publishes 64 bits and reads all 32: one exchange for a
// warp-collective operation that moves many values (kernels/mma.cuh's mma.sync twin), where
// shuffles would take one exchange per value.
inline std::array<uint64_t, kWarpSize> warp_all_gather(uint64_t bits) {
  const ThreadContext& self = *t_cuda_thread;
  return self.warp().exchange(0xffffffffu, self.lane(), bits);
}

// __syncthreads_count: a block barrier that also counts the threads whose `pred` holds.
inline int syncthreads_count(bool pred) {
  ThreadContext& self = *t_cuda_thread;
  const int round = self.sync_count_round++;
  auto& counts = self.block->sync_counts;
  counts[(round + 1) % 3].store(0, std::memory_order_relaxed);
  if (pred) counts[round % 3].fetch_add(1, std::memory_order_relaxed);
  // Why: every live thread has added (and cleared the next slot) before any reads the tally.
  self.block->sync();
  return counts[round % 3].load(std::memory_order_relaxed);
}

inline unsigned ballot(unsigned mask, bool pred) {
  const ThreadContext& self = *t_cuda_thread;
  const auto slots = self.warp().exchange(mask, self.lane(), pred ? 1 : 0);
  unsigned bits = 0;
  for (int l = 0; l < kWarpSize; ++l) {
    if ((mask & (1u << l)) != 0 && slots[l] != 0) bits |= 1u << l;
  }
  return bits;
}

}  // namespace zero::emu

// ---- CUDA's device-side vocabulary, as the kernels spell it.
#define threadIdx (::zero::emu::t_cuda_thread->thread_idx)
#define blockIdx (::zero::emu::t_cuda_thread->block_idx)
#define blockDim (::zero::emu::t_cuda_thread->block_dim)
#define gridDim (::zero::emu::t_cuda_thread->grid_dim)
#define warpSize (::zero::emu::kWarpSize)
#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __forceinline__
#define __forceinline__ inline

inline void __syncthreads() { ::zero::emu::t_cuda_thread->block->sync(); }
inline int __syncthreads_count(int pred) { return ::zero::emu::syncthreads_count(pred != 0); }
inline int __syncthreads_or(int pred) { return ::zero::emu::syncthreads_count(pred != 0) != 0; }
inline int __syncthreads_and(int pred) { return ::zero::emu::syncthreads_count(pred == 0) == 0; }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::zero::emu::t_cuda_thread->warp().exchange(mask, ::zero::emu::t_cuda_thread->lane(), 0);
}

template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  const int lane = ::zero::emu::t_cuda_thread->lane();
  return ::zero::emu::shuffle(mask, v, (lane / width) * width + src_lane % width);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = ::zero::emu::t_cuda_thread->lane();
  const int src = lane ^ lane_mask;
  return ::zero::emu::shuffle(mask, v, src >= (lane / width + 1) * width ? -1 : src);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::zero::emu::t_cuda_thread->lane();
  const int d = static_cast<int>(delta);
  return ::zero::emu::shuffle(mask, v, lane % width + d >= width ? -1 : lane + d);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::zero::emu::t_cuda_thread->lane();
  const int d = static_cast<int>(delta);
  return ::zero::emu::shuffle(mask, v, lane % width < d ? -1 : lane - d);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return ::zero::emu::ballot(mask, pred != 0);
}
inline int __any_sync(unsigned mask, int pred) { return ::zero::emu::ballot(mask, pred != 0) != 0; }
inline int __all_sync(unsigned mask, int pred) {
  return ::zero::emu::ballot(mask, pred != 0) == ::zero::emu::ballot(mask, true);
}

template <typename T>
T atomicAdd(T* address, T v) {
  return std::atomic_ref<T>(*address).fetch_add(v);
}

// Round-to-nearest intrinsics: the host's IEEE operations (no contraction: the emulator target is
// built with -ffp-contract=off).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline unsigned __float_as_uint(float f) { return static_cast<unsigned>(::zero::emu::to_bits(f)); }
inline float __uint_as_float(unsigned u) { return ::zero::emu::from_bits<float>(u); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }

// CUDA's device-side min / max overloads (one type per call, as the kernels use them).
#define ZERO_EMU_MIN_MAX(T)                        \
  inline T min(T a, T b) { return b < a ? b : a; } \
  inline T max(T a, T b) { return a < b ? b : a; }
ZERO_EMU_MIN_MAX(int)
ZERO_EMU_MIN_MAX(unsigned)
ZERO_EMU_MIN_MAX(long)
ZERO_EMU_MIN_MAX(unsigned long)
ZERO_EMU_MIN_MAX(long long)
ZERO_EMU_MIN_MAX(unsigned long long)
#undef ZERO_EMU_MIN_MAX

// ---- The runtime calls answered here (the rest: runtime_emu.h).
#define cudaGetLastError() (::zero::emu::get_last_error())
#define cudaPeekAtLastError() (::zero::emu::t_last_error)
#define cudaGetErrorString(err) (::zero::emu::error_string(err))
#define cudaFuncSetAttribute(kernel, attr, value) \
  (::zero::emu::func_set_attribute(reinterpret_cast<const void*>(kernel), (attr), (value)))
