// host_memory() against the kernel's other accounting: /proc/self/statm (pages) and getrusage.
#include "core/process_memory.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

namespace zero {
namespace {

int64_t statm_rss_bytes() {
  long long size_pages = 0, resident_pages = 0;
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  const int n = std::fscanf(f, "%lld %lld", &size_pages, &resident_pages);
  std::fclose(f);
  return n == 2 ? resident_pages * ::sysconf(_SC_PAGESIZE) : -1;
}

TEST(HostMemory, AgreesWithStatmAndRusageAndSeesAnAllocation) {
  auto before = host_memory();
  ASSERT_TRUE(before.has_value());
  // 64 MiB touched: resident now, and the peak follows.
  std::vector<char> block(64 << 20);
  std::memset(block.data(), 1, block.size());
  auto after = host_memory();
  ASSERT_TRUE(after.has_value());
  const int64_t statm = statm_rss_bytes();
  ASSERT_GT(statm, 0);
  // Two reads a moment apart: within 8 MiB of each other.
  EXPECT_NEAR(static_cast<double>(after->rss_bytes), static_cast<double>(statm), 8 << 20);
  EXPECT_GE(after->rss_bytes, before->rss_bytes + (60 << 20));
  EXPECT_GE(after->rss_peak_bytes, after->rss_bytes);
  rusage usage{};
  ASSERT_EQ(::getrusage(RUSAGE_SELF, &usage), 0);
  EXPECT_NEAR(static_cast<double>(after->rss_peak_bytes), usage.ru_maxrss * 1024.0, 8 << 20);
  volatile char sink = block[block.size() / 2];
  (void)sink;
}

}  // namespace
}  // namespace zero
