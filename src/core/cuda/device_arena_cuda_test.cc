// DeviceArena: steady-state reuse without cudaMalloc, peak accounting, out-of-memory as a Status.
#include "core/cuda/device_arena.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/device.h"

namespace zero::cuda {
namespace {

// On the CPU emulator (src/emu/device_arena_emu_test.cc, docs/emu.md) every test runs.
#if defined(ZERO_CUDA_EMU)
#define SKIP_WITHOUT_GPU() \
  do {                     \
  } while (0)
#else
#define SKIP_WITHOUT_GPU()                                                           \
  do {                                                                               \
    if (!probe_cuda().available) GTEST_SKIP() << "no GPU: " << probe_cuda().why_not; \
  } while (0)
#endif

TEST(DeviceArena, RoundsSizes) {
  EXPECT_EQ(DeviceArena::round_size(1), 512u);
  EXPECT_EQ(DeviceArena::round_size(512), 512u);
  EXPECT_EQ(DeviceArena::round_size(513), 1024u);
  EXPECT_EQ(DeviceArena::round_size((size_t{1} << 20) + 1), size_t{2} << 20);
  EXPECT_EQ(DeviceArena::round_size((size_t{5} << 20)), size_t{6} << 20);
}

TEST(DeviceArena, SteadyStateStepsDoNotCallCudaMalloc) {
  SKIP_WITHOUT_GPU();
  DeviceArena arena(0);
  const std::vector<size_t> step = {1000, 4096, 3 << 20, 777, 1 << 20, 12345};
  auto run_step = [&] {
    std::vector<void*> ptrs;
    for (size_t b : step) {
      auto p = arena.allocate(b);
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      ptrs.push_back(*p);
    }
    for (void* p : ptrs) arena.free(p);
  };
  run_step();
  const int64_t mallocs = arena.stats().cuda_malloc_calls;
  for (int i = 0; i < 5; ++i) run_step();
  EXPECT_EQ(arena.stats().cuda_malloc_calls, mallocs);
  EXPECT_EQ(arena.stats().in_use_bytes, 0);
  EXPECT_GT(arena.stats().peak_in_use_bytes, int64_t{4} << 20);
}

TEST(DeviceArena, OutOfMemoryIsAStatus) {
  SKIP_WITHOUT_GPU();
  DeviceArena arena(0);
  auto p = arena.allocate(size_t{1} << 50);  // 1 PiB
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(p.status().message().find("out of GPU memory"), std::string::npos);
}

TEST(DeviceBuffer, ReturnsItsBlockToTheArena) {
  SKIP_WITHOUT_GPU();
  DeviceArena arena(0);
  {
    auto b = DeviceBuffer::create(1 << 16, &arena);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(arena.stats().in_use_bytes, 1 << 16);
    DeviceBuffer moved = std::move(*b);
    EXPECT_FALSE(moved.empty());
  }
  EXPECT_EQ(arena.stats().in_use_bytes, 0);
}

}  // namespace
}  // namespace zero::cuda
