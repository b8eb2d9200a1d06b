// ParamStore: placement under max_in_cpu, round trips through the NVMe swap file in pieces of
// buffer_size (odd sizes, 16-bit disk format), read-ahead / write-behind ordering, bounded staging,
// injected I/O errors, and cleanup.
#include "sharding/param_store.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"
#include "model/model_config.h"
#include "model/param_layout.h"
#include "offload/nvme_swapper.h"

namespace zero::sharding {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir() {
  static std::atomic<int> counter{0};
  return (fs::temp_directory_path() /
          fmt::format("zero_param_store_test_{}_{}", ::getpid(), counter++) / "swap")
      .string();
}

model::ModelConfig tiny_gpt2() {
  auto c = model::preset_model_config("gpt2-tiny");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return *c;
}

std::vector<float> random_values(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

struct Fixture {
  model::ModelLayout model;
  ShardLayout layout;
  MemoryAccounting memory;
  explicit Fixture(int world = 3, int rank = 1) : model(tiny_gpt2()), layout(model, world, rank) {}
  std::vector<bool> none_persistent() const {
    return std::vector<bool>(static_cast<size_t>(layout.num_units()), false);
  }
};

ParamOffloadOptions nvme_options(int64_t max_in_cpu, int buffer_count, int64_t buffer_numel) {
  ParamOffloadOptions o;
  o.device = ParamOffload::kNvme;
  o.nvme_path = fresh_dir();
  o.max_in_cpu_numel = max_in_cpu;
  o.buffer_count = buffer_count;
  o.buffer_numel = buffer_numel;
  o.aio.block_size_bytes = 64 << 10;
  return o;
}

// A shard's values as fp32 (the store holds them in its dtype).
std::vector<float> widened(const void* shard, DType dtype, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  convert_to_f32(shard, dtype, out.data(), out.size());
  return out;
}

// Shards are stored in the model dtype: a 16-bit model's take half an fp32 model's host bytes, and
// hold exactly the rounded master values.
class ParamStoreHost : public testing::TestWithParam<DType> {};

TEST_P(ParamStoreHost, ShardsAreStoredInTheModelDtype) {
  const DType dtype = GetParam();
  Fixture f;
  ParamOffloadOptions o;
  o.device = ParamOffload::kCpu;
  auto store = ParamStore::create(f.layout, o, f.none_persistent(), dtype, 1, f.memory);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  EXPECT_EQ((*store)->num_on_nvme(), 0);
  EXPECT_EQ((*store)->dtype(), dtype);
  EXPECT_EQ(f.memory.param_bytes,
            f.layout.total_shard_numel() * static_cast<int64_t>(dtype_bytes(dtype)));
  EXPECT_EQ(f.memory.offloaded_param_bytes, 0);
  const int64_t n = f.layout.unit(1).shard_numel;
  std::vector<float> v = random_values(n, 7);
  ASSERT_TRUE((*store)->write(1, v.data()).ok());
  auto got = (*store)->load(1);
  ASSERT_TRUE(got.ok());
  // The stored bytes are the model dtype's encoding of each rounded value.
  std::vector<char> want(static_cast<size_t>(n) * dtype_bytes(dtype));
  convert_from_f32(v.data(), want.data(), dtype, static_cast<size_t>(n));
  ASSERT_EQ(std::memcmp(*got, want.data(), want.size()), 0);
  const std::vector<float> w = widened(*got, dtype, n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(w[static_cast<size_t>(i)], round_to_dtype(v[static_cast<size_t>(i)], dtype)) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ParamStoreHost,
                         testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const testing::TestParamInfo<DType>& i) {
                           return std::string(dtype_name(i.param));
                         });

TEST(ParamStore, MaxInCpuKeepsAPrefixAndPersistentUnitsInMemory) {
  Fixture f;
  std::vector<bool> persistent = f.none_persistent();
  persistent.back() = true;  // the final unit (norm) stays in memory whatever max_in_cpu says
  const int64_t first = f.layout.unit(0).shard_numel;
  const int64_t last = f.layout.unit(f.layout.num_units() - 1).shard_numel;
  auto o = nvme_options(first + last, 2, 1 << 20);
  auto store = ParamStore::create(f.layout, o, persistent, DType::kF32, 1, f.memory);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  EXPECT_FALSE((*store)->on_nvme(0));
  for (int u = 1; u + 1 < f.layout.num_units(); ++u) EXPECT_TRUE((*store)->on_nvme(u)) << u;
  EXPECT_FALSE((*store)->on_nvme(f.layout.num_units() - 1));
  EXPECT_GT(f.memory.offloaded_param_bytes, 0);
  EXPECT_TRUE(fs::exists(o.nvme_path));
  store->reset();
  EXPECT_FALSE(fs::exists(o.nvme_path)) << "the swap directory outlived the store";
}

struct PieceCase {
  DType dtype;
  int buffer_count;
  int64_t buffer_numel;  // smaller than a shard: shards move in several pieces
};

class ParamStorePieces : public testing::TestWithParam<PieceCase> {};

TEST_P(ParamStorePieces, EveryShardRoundTripsThroughTheSwapFile) {
  const PieceCase k = GetParam();
  Fixture f(3, 2);  // world 3: shard sizes are not multiples of the piece size
  auto o = nvme_options(0, k.buffer_count, k.buffer_numel);
  auto store = ParamStore::create(f.layout, o, f.none_persistent(), k.dtype, 2, f.memory);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  ParamStore& s = **store;
  ASSERT_EQ(s.num_on_nvme(), f.layout.num_units());
  // The swap file holds every shard in the model dtype (each in whole 4 KiB slots).
  int64_t file_bytes = 0;
  for (int u = 0; u < f.layout.num_units(); ++u) {
    file_bytes += static_cast<int64_t>(offload::NvmeSwapper::slot_bytes(
        static_cast<uint64_t>(f.layout.unit(u).shard_numel) * dtype_bytes(k.dtype)));
  }
  EXPECT_EQ(f.memory.offloaded_param_bytes, file_bytes);
  EXPECT_LE(s.staging_numel(), std::max<int64_t>(k.buffer_numel, 4096 / 2));
  // Write every unit (write-behind: several pieces in flight), then read them in a different order
  // with read-ahead of later units, twice (a second write must win over the first).
  for (int round = 0; round < 2; ++round) {
    std::vector<std::vector<float>> want;
    for (int u = 0; u < f.layout.num_units(); ++u) {
      want.push_back(random_values(f.layout.unit(u).shard_numel, 100 * round + u));
      ASSERT_TRUE(s.write(u, want.back().data()).ok());
    }
    for (int u = f.layout.num_units() - 1; u >= 0; --u) {
      if (u > 0) {
        ASSERT_TRUE(s.prefetch(u - 1).ok());
      }
      auto got = s.load(u);
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      const std::vector<float>& w = want[static_cast<size_t>(u)];
      const std::vector<float> g = widened(*got, k.dtype, static_cast<int64_t>(w.size()));
      for (size_t i = 0; i < w.size(); ++i) {
        ASSERT_EQ(g[i], round_to_dtype(w[i], k.dtype)) << "unit " << u << " element " << i;
      }
      // The loaded copy is in the model dtype too: dropping it frees exactly its bytes.
      const int64_t loaded = f.memory.param_bytes;
      s.drop(u);
      EXPECT_EQ(loaded - f.memory.param_bytes,
                static_cast<int64_t>(w.size() * dtype_bytes(k.dtype)));
    }
  }
  EXPECT_TRUE(s.flush().ok());
  EXPECT_GT(s.pieces_read(), f.layout.num_units());  // some shards needed several pieces
}

INSTANTIATE_TEST_SUITE_P(Cases, ParamStorePieces,
                         testing::Values(PieceCase{DType::kF32, 1, 1024},
                                         PieceCase{DType::kF32, 3, 1},  // rounded up to 4 KiB
                                         PieceCase{DType::kBF16, 2, 2048},
                                         PieceCase{DType::kF16, 5, 100'000'000}));

TEST(ParamStore, StagingNeverExceedsTheLargestShard) {
  Fixture f(1, 0);
  auto o = nvme_options(0, 5, 100'000'000);  // DeepSpeed's default: 1e8 elements per buffer
  auto store = ParamStore::create(f.layout, o, f.none_persistent(), DType::kBF16, 0, f.memory);
  ASSERT_TRUE(store.ok());
  int64_t largest = 0;
  for (int u = 0; u < f.layout.num_units(); ++u) {
    largest = std::max(largest, f.layout.unit(u).shard_numel);
  }
  EXPECT_LE((*store)->staging_numel(), largest + 2048);
  // Resident bytes: the staging buffers only (no shard is held in memory).
  EXPECT_LE(f.memory.param_bytes, 5 * ((*store)->staging_numel() * 2 + 4096));
}

class FailNthCompletion : public offload::NvmeFaultHook {
 public:
  std::atomic<int64_t> completions{0};
  int64_t fail_nth = -1;
  int64_t on_completion(const offload::IoRequestInfo&, int64_t result) override {
    return ++completions == fail_nth ? -EIO : result;
  }
};

TEST(ParamStore, AnInjectedReadErrorIsReturnedNamingTheUnit) {
  Fixture f(2, 0);
  FailNthCompletion hook;
  auto o = nvme_options(0, 2, 4096);
  o.fault_hook = &hook;
  o.aio.block_size_bytes = 1 << 20;  // one request per piece
  auto store = ParamStore::create(f.layout, o, f.none_persistent(), DType::kF32, 0, f.memory);
  ASSERT_TRUE(store.ok());
  std::vector<float> v = random_values(f.layout.unit(1).shard_numel, 3);
  ASSERT_TRUE((*store)->write(1, v.data()).ok());
  ASSERT_TRUE((*store)->flush().ok());
  hook.fail_nth = hook.completions + 1;  // the next completion: the first piece read back
  auto got = (*store)->load(1);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("unit 1"), std::string::npos) << got.status().message();
  EXPECT_NE(got.status().message().find("reading"), std::string::npos) << got.status().message();
}

TEST(ParamStore, NvmeWithoutPathIsAnErrorNamingTheKey) {
  Fixture f;
  auto o = nvme_options(0, 2, 4096);
  o.nvme_path.clear();
  auto store = ParamStore::create(f.layout, o, f.none_persistent(), DType::kF32, 0, f.memory);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("zero_optimization.offload_param.nvme_path"),
            std::string::npos);
}

}  // namespace
}  // namespace zero::sharding
