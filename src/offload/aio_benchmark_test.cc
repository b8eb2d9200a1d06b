// Smoke test of the aio benchmark; the full measurement is DISABLED_Full (run it with
// --gtest_also_run_disabled_tests; ZERO_AIO_BENCH_DIR / _MIB / _QD / _BS / _T override).
#include "offload/aio_benchmark.h"

#include <unistd.h>

#include <cstdlib>

#include <gtest/gtest.h>

namespace zero::offload {
namespace {

TEST(AioBenchmarkTest, SmallRunWithFio) {
  AioBenchOptions o;
  o.file_bytes = 16 << 20;
  o.repeats = 1;
  o.run_fio = ::access(o.fio_path.c_str(), X_OK) == 0;
  auto result = measure_aio(o);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_GT(result->swapper_read_gbps, 0);
  EXPECT_GT(result->swapper_write_gbps, 0);
  if (o.run_fio) {
    EXPECT_GT(result->fio_read_gbps, 0);
  }
}

TEST(AioBenchmarkTest, RejectsSizeNotMultipleOfBlock) {
  AioBenchOptions o;
  o.file_bytes = (1 << 20) + 4096;
  EXPECT_EQ(measure_aio(o).status().code(), StatusCode::kInvalidArgument);
}

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoll(v) : fallback;
}

TEST(AioBenchmarkTest, DISABLED_Full) {
  AioBenchOptions o;
  if (const char* dir = std::getenv("ZERO_AIO_BENCH_DIR")) o.dir = dir;
  o.file_bytes = static_cast<uint64_t>(env_int("ZERO_AIO_BENCH_MIB", 1024)) << 20;
  o.aio.queue_depth = static_cast<int>(env_int("ZERO_AIO_BENCH_QD", 8));
  o.aio.block_size_bytes = static_cast<uint64_t>(env_int("ZERO_AIO_BENCH_BS", 1 << 20));
  o.aio.intra_op_parallelism = static_cast<int>(env_int("ZERO_AIO_BENCH_T", 1));
  o.aio.overlap_events = env_int("ZERO_AIO_BENCH_OVERLAP", 1) != 0;
  o.aio.single_submit = env_int("ZERO_AIO_BENCH_SINGLE", 0) != 0;
  o.repeats = static_cast<int>(env_int("ZERO_AIO_BENCH_REPEATS", 3));
  EXPECT_EQ(run_aio_benchmark(o), 0);
}

}  // namespace
}  // namespace zero::offload
