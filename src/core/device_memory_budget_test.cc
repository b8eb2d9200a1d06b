// ZERO_DEVICE_MEMORY_LIMIT's syntax and the one-line out-of-device-memory message.
#include "core/device_memory_budget.h"

#include <gtest/gtest.h>

namespace zero {
namespace {

TEST(DeviceMemoryBudget, ParsesBytesAndBinaryUnits) {
  EXPECT_EQ(parse_device_memory_limit("1").value(), 1);
  EXPECT_EQ(parse_device_memory_limit("4096").value(), 4096);
  EXPECT_EQ(parse_device_memory_limit("512MiB").value(), int64_t{512} << 20);
  EXPECT_EQ(parse_device_memory_limit("3G").value(), int64_t{3} << 30);
  EXPECT_EQ(parse_device_memory_limit("7K").value(), 7 * 1024);
  for (const char* bad : {"", "MiB", "12MB", "-5", "1.5GiB", " 12", "99999999999999999"}) {
    auto r = parse_device_memory_limit(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("ZERO_DEVICE_MEMORY_LIMIT="), std::string::npos);
  }
}

TEST(DeviceMemoryBudget, MessageNamesBufferBytesPlanAndDevice) {
  DeviceAllocFailure f{.what = "the CUDA model's activation slab for 8 x 1024 tokens (bf16)",
                       .bytes = int64_t{3} << 30,
                       .planned_bytes = int64_t{3} << 30,
                       .device = 2,
                       .free_bytes = int64_t{1} << 30,
                       .total_bytes = int64_t{80} << 30,
                       .limit_bytes = std::nullopt,
                       .cuda_error = "out of memory",
                       .advice = "a smaller --per_device_train_batch_size"};
  EXPECT_EQ(device_alloc_failure_message(f),
            "zero: error: out of GPU memory on device 2: the CUDA model's activation slab for 8 x "
            "1024 tokens (bf16) asks for 3221225472 bytes (3072.0 MiB); the memory plan counted "
            "3221225472 bytes (3072.0 MiB) for it; the device has 1024.0 MiB free of 81920.0 MiB "
            "(cudaMalloc: out of memory). Try a smaller --per_device_train_batch_size");
  f.cuda_error.clear();
  f.planned_bytes = -1;
  f.limit_bytes = 1 << 20;
  EXPECT_EQ(device_alloc_failure_message(f),
            "zero: error: out of GPU memory on device 2: the CUDA model's activation slab for 8 x "
            "1024 tokens (bf16) asks for 3221225472 bytes (3072.0 MiB); the device has 1024.0 MiB "
            "free of 81920.0 MiB; ZERO_DEVICE_MEMORY_LIMIT allows 1048576 bytes (1.0 MiB) in use. "
            "Try a smaller --per_device_train_batch_size");
}

}  // namespace
}  // namespace zero
