// OptimizerStateStore: every placement (resident, host offload with a ratio, NVMe with and without
// pipelining) gives the same state after the same updates as a plain in-memory reference, installs
// every unit once per step, and restores what load_all gives it; in fp32 and with a bf16 state
// (bf16 master weights, fp32 or bf16 moments: the reference rounds where the store stores bf16).
#include "runtime/optimizer_state_store.h"

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace zero::runtime {
namespace {

struct Placement {
  std::string name;
  OptimizerOffload device;
  double ratio;
  bool pipeline;
};

class StateStore : public ::testing::TestWithParam<Placement> {};

// Units of odd sizes (one empty partition, as a rank past a small unit's end has).
const std::vector<int64_t> kNumel = {37, 0, 1024, 5, 4099};

float initial(int u, int64_t i) { return static_cast<float>(u * 1000 + i) * 0.001f; }

// The update every placement runs: deterministic in (u, i, step).
void update_ref(int u, int step, float* master, float* m, float* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    m[i] = 0.9f * m[i] + static_cast<float>(step + u);
    v[i] = v[i] + master[i] * master[i];
    master[i] = master[i] * 0.5f + m[i] * 0.01f;
  }
}

// The visitor over the store's dtypes: widened, updated as update_ref, rounded back.
void update_refs(int u, int step, const OptimizerStateStore::StateRefs& st, int64_t n) {
  if (n == 0) return;  // an empty partition (a unit smaller than the world): no buffers to convert
  std::vector<float> f[3];
  const TensorView* views[3] = {&st.master, &st.exp_avg, &st.exp_avg_sq};
  for (int k = 0; k < 3; ++k) {
    f[k].resize(static_cast<size_t>(n));
    convert_to_f32(views[k]->data, views[k]->dtype, f[k].data(), static_cast<size_t>(n));
  }
  update_ref(u, step, f[0].data(), f[1].data(), f[2].data(), n);
  for (int k = 0; k < 3; ++k) {
    convert_from_f32(f[k].data(), views[k]->data, views[k]->dtype, static_cast<size_t>(n));
  }
}

void run_placement(const Placement& p, StateDtypes dtypes) {
  SCOPED_TRACE(std::string("master ") + std::string(dtype_name(dtypes.master)) + " moments " +
               std::string(dtype_name(dtypes.moments)));
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("zero_state_store_" + p.name)).string();
  std::filesystem::remove_all(dir);
  OffloadOptions off;
  off.optimizer = p.device;
  off.ratio = p.ratio;
  off.nvme_path = dir;
  off.pipeline_read = off.pipeline_write = p.pipeline;
  sharding::MemoryAccounting memory;
  std::vector<int> installs(kNumel.size(), 0);
  auto fill = [](int u, float* master) {
    for (int64_t i = 0; i < kNumel[static_cast<size_t>(u)]; ++i) master[i] = initial(u, i);
    return ok_status();
  };
  // install sees the master weights as stored.
  auto install_checked = [&](int u, const TensorView& master) {
    EXPECT_EQ(master.dtype, dtypes.master);
    EXPECT_EQ(master.numel(), kNumel[static_cast<size_t>(u)]);
    ++installs[static_cast<size_t>(u)];
    return ok_status();
  };
  auto store =
      OptimizerStateStore::create(off, kNumel, 0, memory, fill, install_checked, nullptr, dtypes);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  EXPECT_EQ((*store)->on_nvme(), p.device == OptimizerOffload::kNvme && p.ratio > 0);
  if (p.device != OptimizerOffload::kNvme) {
    // 4 or 2 bytes per element for the master weights, and per moment.
    int64_t total = 0;
    for (int64_t n : kNumel) total += n;
    EXPECT_EQ(memory.master_bytes, total * static_cast<int64_t>(dtype_bytes(dtypes.master)));
    EXPECT_EQ(memory.optimizer_state_bytes,
              2 * total * static_cast<int64_t>(dtype_bytes(dtypes.moments)));
  }

  // The reference: plain vectors.
  std::vector<std::vector<float>> master, m, v;
  for (size_t u = 0; u < kNumel.size(); ++u) {
    master.emplace_back(static_cast<size_t>(kNumel[u]));
    m.emplace_back(static_cast<size_t>(kNumel[u]), 0.0f);
    v.emplace_back(static_cast<size_t>(kNumel[u]), 0.0f);
    for (int64_t i = 0; i < kNumel[u]; ++i) master[u][static_cast<size_t>(i)] = initial(int(u), i);
    round_to_dtype(master[u].data(), master[u].data(), master[u].size(), dtypes.master);
  }
  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE((*store)
                    ->update_all(
                        [&](int u, const OptimizerStateStore::StateRefs& st) {
                          EXPECT_EQ(st.master.dtype, dtypes.master);
                          EXPECT_EQ(st.exp_avg.dtype, dtypes.moments);
                          update_refs(u, step, st, kNumel[static_cast<size_t>(u)]);
                        },
                        install_checked)
                    .ok());
    for (size_t u = 0; u < kNumel.size(); ++u) {
      update_ref(static_cast<int>(u), step, master[u].data(), m[u].data(), v[u].data(), kNumel[u]);
      round_to_dtype(master[u].data(), master[u].data(), master[u].size(), dtypes.master);
      round_to_dtype(m[u].data(), m[u].data(), m[u].size(), dtypes.moments);
      round_to_dtype(v[u].data(), v[u].data(), v[u].size(), dtypes.moments);
    }
  }
  for (size_t u = 0; u < kNumel.size(); ++u) EXPECT_EQ(installs[u], 4) << "unit " << u;
  for (size_t u = 0; u < kNumel.size(); ++u) {
    std::vector<float> a(static_cast<size_t>(kNumel[u])), b(a.size()), c(a.size());
    ASSERT_TRUE((*store)->read_partition(static_cast<int>(u), a.data(), b.data(), c.data()).ok());
    EXPECT_EQ(a, master[u]) << "unit " << u;
    EXPECT_EQ(b, m[u]) << "unit " << u;
    EXPECT_EQ(c, v[u]) << "unit " << u;
  }

  // load_all replaces everything (checkpoint restore), wherever it lives.
  ASSERT_TRUE((*store)
                  ->load_all(
                      [&](int u, float* ms, float* ea, float* eas) {
                        for (int64_t i = 0; i < kNumel[static_cast<size_t>(u)]; ++i) {
                          ms[i] = -1.0f * static_cast<float>(i);
                          ea[i] = 2.0f;
                          eas[i] = 3.0f;
                        }
                        return ok_status();
                      },
                      install_checked)
                  .ok());
  for (size_t u = 0; u < kNumel.size(); ++u) {
    std::vector<float> a(static_cast<size_t>(kNumel[u])), b(a.size());
    ASSERT_TRUE((*store)->read_partition(static_cast<int>(u), a.data(), nullptr, b.data()).ok());
    for (int64_t i = 0; i < kNumel[u]; ++i) {
      EXPECT_EQ(a[static_cast<size_t>(i)],
                round_to_dtype(-1.0f * static_cast<float>(i), dtypes.master));
      EXPECT_EQ(b[static_cast<size_t>(i)], 3.0f);
    }
  }
  store->reset();
  std::filesystem::remove_all(dir);
}

TEST_P(StateStore, SameStateAsAPlainReferenceInEveryPlacement) {
  for (StateDtypes dtypes : {StateDtypes{}, StateDtypes{DType::kBF16, DType::kF32},
                             StateDtypes{DType::kBF16, DType::kBF16}}) {
    run_placement(GetParam(), dtypes);
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Placements, StateStore,
    ::testing::Values(Placement{"resident", OptimizerOffload::kNone, 1.0, false},
                      Placement{"cpu_ratio", OptimizerOffload::kCpu, 0.6, false},
                      Placement{"nvme", OptimizerOffload::kNvme, 1.0, false},
                      Placement{"nvme_pipelined_ratio", OptimizerOffload::kNvme, 0.6, true}),
    [](const ::testing::TestParamInfo<Placement>& info) { return info.param.name; });

TEST(StateStoreErrors, RatioOutOfRangeIsNamed) {
  OffloadOptions off;
  off.optimizer = OptimizerOffload::kCpu;
  off.ratio = 1.5;
  sharding::MemoryAccounting memory;
  auto store = OptimizerStateStore::create(
      off, kNumel, 0, memory, [](int, float*) { return ok_status(); },
      [](int, const TensorView&) { return ok_status(); });
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("offload_optimizer.ratio"), std::string::npos);
}

}  // namespace
}  // namespace zero::runtime
