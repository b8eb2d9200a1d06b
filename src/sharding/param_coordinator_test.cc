// ParamCoordinator across worlds 1-4 in one process (ThreadCommunicator): whatever the stage,
// overlap, prefetch bucket, persistence threshold and model dtype, acquire(u) on every rank gives
// the full unit exactly as the owners installed it (rounded once to the model dtype), in forward
// and backward order, micro-step after micro-step; stage 3 re-gathers what it released.
#include "sharding/param_coordinator.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/thread_communicator.h"
#include "core/dtype.h"
#include "device/backend.h"
#include "model/model_config.h"
#include "model/param_layout.h"

namespace zero::sharding {
namespace {

float master_value(int u, int64_t i) {
  return static_cast<float>((u * 131 + i * 7) % 1009) / 97.0f - 5.0f;
}

// Installs master_value(u, i) + offset as every unit's values on this rank: the whole padded unit
// at stage 0 (every rank holds it), the rank's own shard at stages 1-3; padding zero.
bool install_master_values(ParamCoordinator& pc, const ShardLayout& shards, int stage,
                           float offset = 0.0f) {
  for (int u = 0; u < shards.num_units(); ++u) {
    const UnitShardInfo& info = shards.unit(u);
    const int64_t begin = stage == 0 ? 0 : shards.shard_begin(u);
    const int64_t n = stage == 0 ? info.padded_numel : info.shard_numel;
    std::vector<float> values(static_cast<size_t>(n), 0.0f);
    for (int64_t k = 0; k < n; ++k) {
      if (begin + k < info.numel)
        values[static_cast<size_t>(k)] = master_value(u, begin + k) + offset;
    }
    if (!pc.set_values(u, values.data()).ok()) return false;
  }
  return true;
}

struct Case {
  int world;
  int stage;
  bool overlap;
  int64_t prefetch_numel;
  int64_t persistence_numel;
  DType dtype;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return "w" + std::to_string(c.world) + "_s" + std::to_string(c.stage) +
         (c.overlap ? "_overlap" : "") + "_prefetch" + std::to_string(c.prefetch_numel) +
         "_persist" + std::to_string(c.persistence_numel) + "_" + std::string(dtype_name(c.dtype));
}

class ParamCoordinatorWorlds : public ::testing::TestWithParam<Case> {};

TEST_P(ParamCoordinatorWorlds, EveryRankSeesTheInstalledUnits) {
  const Case c = GetParam();
  auto config = model::preset_model_config("gpt2-tiny");
  ASSERT_TRUE(config.ok());
  const model::ModelLayout layout(*config);
  std::atomic<int> bad{0}, checked{0};
  ThreadCommunicator::run(c.world, [&](Communicator& comm) {
    const ShardLayout shards(layout, comm.world_size(), comm.rank());
    ZeroOptions o;
    o.stage = c.stage;
    o.overlap_comm = c.overlap;
    o.prefetch_bucket_numel = c.prefetch_numel;
    o.param_persistence_threshold_numel = c.persistence_numel;
    o.model_dtype = c.dtype;
    MemoryAccounting memory;
    auto coord = ParamCoordinator::create(shards, comm, o, ParamOffloadOptions{}, memory);
    if (!coord.ok()) {
      ++bad;
      return;
    }
    const int units = layout.num_units();
    if (!install_master_values(**coord, shards, c.stage)) ++bad;
    if (!(*coord)->finish_updates().ok()) ++bad;
    auto check = [&](int u) {
      const model::ParamView view = (*coord)->acquire(u);
      // Working values are in the model dtype, a world of one's lent stage-3 shard included.
      if (view.dtype != c.dtype || view.numel < shards.unit(u).numel) ++bad;
      std::vector<float> p(static_cast<size_t>(view.numel));
      convert_to_f32(view.data, view.dtype, p.data(), p.size());
      for (int64_t i = 0; i < shards.unit(u).numel; ++i) {
        if (p[static_cast<size_t>(i)] != round_to_dtype(master_value(u, i), c.dtype)) ++bad;
        ++checked;
      }
      (*coord)->release(u);
    };
    for (int micro = 0; micro < 2; ++micro) {
      (*coord)->begin_micro_step();
      for (int u = 0; u < units; ++u) check(u);       // forward
      for (int u = units - 1; u >= 0; --u) check(u);  // backward
    }
    if (!(*coord)->status().ok()) ++bad;
  });
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(checked.load(), 0);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int world : {1, 2, 3, 4}) {
    for (int stage : {0, 1, 2, 3}) {
      out.push_back({world, stage, false, 50'000'000, 100'000, DType::kF32});
      out.push_back({world, stage, true, 50'000'000, 100'000, DType::kBF16});
    }
    // Stage 3: no prefetch (0), a bucket smaller than most units, nothing persistent.
    out.push_back({world, 3, true, 0, 0, DType::kF32});
    out.push_back({world, 3, true, 1000, 0, DType::kBF16});
    out.push_back({world, 3, false, 1000, 0, DType::kF16});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(ThreadRanks, ParamCoordinatorWorlds, ::testing::ValuesIn(cases()),
                         case_name);

// Stage 3 with gradient accumulation: a unit released at the end of a micro-step's backward stays
// gathered for the next micro-step of the same step (its values cannot change before it), so that
// forward gathers nothing; without a following micro-step every unit is gathered again; after the
// optimizer installs new values the next acquire gathers them (nothing stale is handed out).
TEST(ParamCoordinatorAccumulation, Stage3KeepsUnitsForTheNextMicroStepOfTheStep) {
  auto config = model::preset_model_config("gpt2-tiny");
  ASSERT_TRUE(config.ok());
  const model::ModelLayout layout(*config);
  for (bool follows : {false, true}) {
    std::atomic<int> bad{0};
    std::atomic<int64_t> forward_gathers{0};
    ThreadCommunicator::run(2, [&](Communicator& comm) {
      const ShardLayout shards(layout, comm.world_size(), comm.rank());
      ZeroOptions o;
      o.stage = 3;
      o.prefetch_bucket_numel = 0;
      o.param_persistence_threshold_numel = 0;
      MemoryAccounting memory;
      auto coord = ParamCoordinator::create(shards, comm, o, ParamOffloadOptions{}, memory);
      if (!coord.ok()) {
        ++bad;
        return;
      }
      const int units = layout.num_units();
      auto install = [&](float offset) {
        if (!install_master_values(**coord, shards, 3, offset)) ++bad;
      };
      auto pass = [&](int u, float offset) {
        const model::ParamView view = (*coord)->acquire(u);
        std::vector<float> p(static_cast<size_t>(view.numel));
        convert_to_f32(view.data, view.dtype, p.data(), p.size());
        for (int64_t i = 0; i < shards.unit(u).numel; ++i) {
          if (p[static_cast<size_t>(i)] != master_value(u, i) + offset) ++bad;
        }
        (*coord)->release(u);
      };
      auto total_gathers = [&] {
        int64_t n = 0;
        for (int u = 0; u < units; ++u) n += (*coord)->gathers(u);
        return n;
      };
      install(0.0f);
      // Micro-step 0 records the trace; micro-step 1 knows whether micro-step 2 follows.
      for (int micro = 0; micro < 2; ++micro) {
        (*coord)->begin_micro_step(/*another_follows=*/micro == 1 && follows);
        for (int u = 0; u < units; ++u) pass(u, 0.0f);
        for (int u = units - 1; u >= 0; --u) pass(u, 0.0f);
      }
      const int64_t before = total_gathers();
      (*coord)->begin_micro_step();
      for (int u = 0; u < units; ++u) pass(u, 0.0f);
      if (comm.rank() == 0) forward_gathers = total_gathers() - before;
      for (int u = units - 1; u >= 0; --u) pass(u, 0.0f);
      // The step ends: new values, and every unit reads them.
      install(1.0f);
      (*coord)->begin_micro_step();
      for (int u = 0; u < units; ++u) pass(u, 1.0f);
      for (int u = units - 1; u >= 0; --u) pass(u, 1.0f);
      if (!(*coord)->status().ok()) ++bad;
    });
    EXPECT_EQ(bad.load(), 0) << "follows " << follows;
    if (follows) {
      EXPECT_EQ(forward_gathers.load(), 0);
    } else {
      EXPECT_EQ(forward_gathers.load(), layout.num_units());
    }
  }
}

// Issue 14: at world 2 the first acquire of every step blocked on gathering the first unit (the
// embedding, 80% of a small GPT-2). Once the trace is known, set_values starts the gathers of the
// units the next forward begins with (the first unit and the prefetch bucket after it), so they
// run while the optimizer updates the rest; acquire then finds them gathered, with the new values.
TEST(ParamCoordinatorPrefetch, Stage3SetValuesGathersTheUnitsTheNextForwardStartsWith) {
  auto config = model::preset_model_config("gpt2-tiny");
  ASSERT_TRUE(config.ok());
  const model::ModelLayout layout(*config);
  const int units = layout.num_units();
  ASSERT_GE(units, 3);
  std::atomic<int> bad{0};
  std::vector<int64_t> issued_by_install(static_cast<size_t>(units), -1);
  ThreadCommunicator::run(2, [&](Communicator& comm) {
    const ShardLayout shards(layout, comm.world_size(), comm.rank());
    ZeroOptions o;
    o.stage = 3;
    // The window: unit 0 (the trace's first), then unit 1 (the bucket holds it exactly); unit 2
    // no longer fits.
    o.prefetch_bucket_numel = shards.unit(1).numel;
    o.param_persistence_threshold_numel = 0;
    MemoryAccounting memory;
    auto coord = ParamCoordinator::create(shards, comm, o, ParamOffloadOptions{}, memory);
    if (!coord.ok()) {
      ++bad;
      return;
    }
    auto pass = [&](int u, float offset) {
      const model::ParamView view = (*coord)->acquire(u);
      std::vector<float> p(static_cast<size_t>(view.numel));
      convert_to_f32(view.data, view.dtype, p.data(), p.size());
      for (int64_t i = 0; i < shards.unit(u).numel; ++i) {
        if (p[static_cast<size_t>(i)] != master_value(u, i) + offset) ++bad;
      }
      (*coord)->release(u);
    };
    if (!install_master_values(**coord, shards, 3)) ++bad;
    // Step 0 records the trace (it is known from the next begin_micro_step on); step 2 checks.
    for (int step = 0; step < 3; ++step) {
      const float offset = static_cast<float>(step);
      std::vector<int64_t> before(static_cast<size_t>(units));
      for (int u = 0; u < units; ++u) before[static_cast<size_t>(u)] = (*coord)->gathers(u);
      if (step > 0 && !install_master_values(**coord, shards, 3, offset)) ++bad;
      if (step == 2 && comm.rank() == 0) {
        for (int u = 0; u < units; ++u) {
          issued_by_install[static_cast<size_t>(u)] =
              (*coord)->gathers(u) - before[static_cast<size_t>(u)];
        }
      }
      if (!(*coord)->finish_updates().ok()) ++bad;
      (*coord)->begin_micro_step();
      for (int u = 0; u < units; ++u) pass(u, offset);
      for (int u = units - 1; u >= 0; --u) pass(u, offset);
    }
    if (!(*coord)->status().ok()) ++bad;
  });
  EXPECT_EQ(bad.load(), 0);
  for (int u = 0; u < units; ++u) {
    EXPECT_EQ(issued_by_install[static_cast<size_t>(u)], u < 2 ? 1 : 0) << "unit " << u;
  }
}

// Issue 14: stage 3 in a world of one gathered each unit by copying its shard into a gather buffer
// (twice a step: forward and backward), 0.73x DeepSpeed's step. The shard is the unit there:
// acquire lends the store's own values (no buffer, no copy), still counted as a gather of the same
// bytes, and hands out the new values after an update, persistent units included. The shard is in
// the model dtype (issue 10), so a 16-bit model is lent 16-bit values, which it widens itself.
class ParamCoordinatorWorldOfOne : public ::testing::TestWithParam<DType> {};

TEST_P(ParamCoordinatorWorldOfOne, Stage3AcquireLendsTheShardWithoutCopying) {
  const DType dtype = GetParam();
  auto config = model::preset_model_config("gpt2-tiny");
  ASSERT_TRUE(config.ok());
  const model::ModelLayout layout(*config);
  ThreadCommunicator::run(1, [&](Communicator& comm) {
    const ShardLayout shards(layout, 1, 0);
    ZeroOptions o;
    o.stage = 3;
    o.model_dtype = dtype;
    o.param_persistence_threshold_numel = 1000;  // some units persistent, some not
    MemoryAccounting memory;
    auto coord = ParamCoordinator::create(shards, comm, o, ParamOffloadOptions{}, memory);
    ASSERT_TRUE(coord.ok());
    ParamCoordinator& pc = **coord;
    // A world of one: the shard is the whole padded unit.
    auto install = [&](float offset) { ASSERT_TRUE(install_master_values(pc, shards, 3, offset)); };
    install(0.0f);
    comm.reset_stats();
    int64_t want_bytes = 0;
    const int64_t esize = static_cast<int64_t>(dtype_bytes(dtype));
    for (float offset : {0.0f, 1.0f}) {
      if (offset != 0.0f) install(offset);
      pc.begin_micro_step();
      for (int u = 0; u < layout.num_units(); ++u) {
        const model::ParamView view = pc.acquire(u);
        ASSERT_EQ(view.dtype, dtype);
        ASSERT_EQ(view.numel, shards.unit(u).padded_numel);
        StatusOr<const void*> shard = const_cast<ParamStore*>(pc.store())->load(u);
        ASSERT_TRUE(shard.ok());
        EXPECT_EQ(view.data, *shard) << "unit " << u << ": a copy, not the shard";
        float p1 = 0.0f;
        convert_to_f32(static_cast<const char*>(view.data) + esize, dtype, &p1, 1);
        EXPECT_EQ(p1, round_to_dtype(master_value(u, 1) + offset, dtype)) << "unit " << u;
        want_bytes += shards.unit(u).padded_numel * esize;
        pc.release(u);
      }
    }
    EXPECT_TRUE(pc.status().ok());
    EXPECT_EQ(comm.stats()[CommKind::kAllGather].bytes, want_bytes);
  });
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ParamCoordinatorWorldOfOne,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& i) {
                           return std::string(dtype_name(i.param));
                         });

// On a device (the CPU backend's streams), values already rounded to the model dtype
// (set_model_dtype_values: ZeRO-Offload rounds on the host before uploading) install the unit
// bitwise as set_values' cast of the fp32 master does, at every stage (world of one; world 2 runs
// in the engine's DeviceStaging offload tests).
TEST(ParamCoordinatorOnADevice, ModelDtypeValuesInstallAsTheCastOfTheMaster) {
  auto config = model::preset_model_config("gpt2-tiny");
  ASSERT_TRUE(config.ok());
  const model::ModelLayout layout(*config);
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(::testing::Message() << "stage " << stage << " " << dtype_name(dtype));
      auto ctx = device::ExecutionContext::create(Device::kCpu);
      ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
      ThreadCommunicator::run(1, [&](Communicator& comm) {
        const ShardLayout shards(layout, 1, 0);
        ZeroOptions o;
        o.stage = stage;
        o.model_dtype = dtype;
        MemoryAccounting mem_a, mem_b;
        auto cast = ParamCoordinator::create(shards, comm, o, {}, mem_a, ctx->get());
        auto plain = ParamCoordinator::create(shards, comm, o, {}, mem_b, ctx->get());
        ASSERT_TRUE(cast.ok() && plain.ok());
        std::vector<std::vector<float>> masters;
        std::vector<std::vector<char>> rounded;
        for (int u = 0; u < shards.num_units(); ++u) {
          const int64_t n = shards.unit(u).padded_numel;
          masters.emplace_back(static_cast<size_t>(n));
          // Values that round differently at every bit position (odd thirds), and padding.
          for (int64_t i = 0; i < n; ++i)
            masters.back()[static_cast<size_t>(i)] = master_value(u, i) / 3.0f;
          rounded.emplace_back(static_cast<size_t>(n) * dtype_bytes(dtype));
          convert_from_f32(masters.back().data(), rounded.back().data(), dtype,
                           static_cast<size_t>(n));
          ASSERT_TRUE((*cast)->set_values(u, masters.back().data()).ok());
          ASSERT_TRUE((*plain)->set_model_dtype_values(u, rounded.back().data()).ok());
        }
        ASSERT_TRUE((*cast)->finish_updates().ok());
        ASSERT_TRUE((*plain)->finish_updates().ok());
        for (ParamCoordinator* pc : {cast->get(), plain->get()}) pc->begin_micro_step();
        for (int u = 0; u < shards.num_units(); ++u) {
          const model::ParamView a = (*cast)->acquire(u);
          const model::ParamView b = (*plain)->acquire(u);
          // Why a host wait: the casts and copies run on the compute stream.
          ASSERT_TRUE((*ctx)->compute().synchronize().ok());
          ASSERT_EQ(a.numel, b.numel);
          ASSERT_EQ(a.dtype, dtype);
          const size_t bytes = static_cast<size_t>(shards.unit(u).numel) * dtype_bytes(dtype);
          EXPECT_EQ(std::memcmp(a.data, b.data, bytes), 0) << "unit " << u;
          EXPECT_EQ(std::memcmp(b.data, rounded[static_cast<size_t>(u)].data(), bytes), 0);
          (*cast)->release(u);
          (*plain)->release(u);
          EXPECT_EQ((*cast)->gathers(u), (*plain)->gathers(u));
        }
        ASSERT_TRUE((*ctx)->compute().synchronize().ok());
      });
    }
  }
}

// Working parameters take the model dtype's bytes: a bf16 model's resident units (stages 0-2),
// host shards and gathered units (stage 3) are half an fp32 model's.
TEST(ParamCoordinatorMemory, WorkingParametersTakeTheModelDtypesBytes) {
  auto config = model::preset_model_config("gpt2-tiny");
  ASSERT_TRUE(config.ok());
  const model::ModelLayout layout(*config);
  for (int stage : {0, 2, 3}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      ThreadCommunicator::run(2, [&](Communicator& comm) {
        const ShardLayout shards(layout, 2, comm.rank());
        ZeroOptions o;
        o.stage = stage;
        o.model_dtype = dtype;
        o.param_persistence_threshold_numel = 0;
        MemoryAccounting memory;
        auto coord = ParamCoordinator::create(shards, comm, o, ParamOffloadOptions{}, memory);
        ASSERT_TRUE(coord.ok());
        int64_t padded = 0, max_padded = 0;
        for (int u = 0; u < layout.num_units(); ++u) {
          std::vector<float> values(static_cast<size_t>(shards.unit(u).padded_numel), 0.5f);
          ASSERT_TRUE((*coord)->set_values(u, values.data()).ok());
          padded += shards.unit(u).padded_numel;
          max_padded = std::max(max_padded, shards.unit(u).padded_numel);
        }
        ASSERT_TRUE((*coord)->finish_updates().ok());
        const int64_t esize = static_cast<int64_t>(dtype_bytes(dtype));
        if (stage < 3) {
          EXPECT_EQ(memory.param_bytes, padded * esize) << "stage " << stage;
        } else {
          // Stage 3 keeps the rank's shards (ParamStore), in the model dtype too.
          EXPECT_EQ(memory.param_bytes, shards.total_shard_numel() * esize);
        }
        (*coord)->begin_micro_step();
        for (int u = 0; u < layout.num_units(); ++u) {
          const model::ParamView view = (*coord)->acquire(u);
          EXPECT_EQ(view.dtype, dtype);
          EXPECT_EQ(view.numel, shards.unit(u).padded_numel);
          EXPECT_NE(view.data, nullptr);
          (*coord)->release(u);
        }
        if (stage == 3) {
          // Nothing persistent, no reuse within the trace: at most the prefetched units at once.
          EXPECT_GT(memory.peak_gathered_param_bytes, 0);
          EXPECT_EQ(memory.peak_gathered_param_bytes % esize, 0);
          EXPECT_LE(memory.peak_gathered_param_bytes, padded * esize);
          EXPECT_GE(memory.peak_gathered_param_bytes, max_padded * esize);
        }
        EXPECT_TRUE((*coord)->status().ok());
      });
    }
  }
}

}  // namespace
}  // namespace zero::sharding
