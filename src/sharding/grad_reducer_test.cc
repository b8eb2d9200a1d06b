// GradReducer across worlds 1-4 in one process (ThreadCommunicator): every stage, overlap on and
// off, buckets that pack several units rank-major and buckets smaller than a unit, fp32 and bf16
// wire. Each rank's partition must equal the sum over ranks and micro-steps of what backward
// handed over, restricted to that rank's range.
#include "sharding/grad_reducer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "comm/thread_communicator.h"
#include "model/model_config.h"
#include "model/param_layout.h"
#include "sharding/shard_layout.h"

namespace zero::sharding {
namespace {

// Rank r's gradient of element i of unit u in micro-step m: small, exact-ish values.
float grad_value(int r, int m, int u, int64_t i) {
  return static_cast<float>(((r + 1) * 31 + m * 17 + u * 7 + i % 101) % 97) / 64.0f - 0.75f;
}

struct Case {
  int world;
  int stage;
  bool overlap;
  int64_t bucket_numel;
  DType wire;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return "w" + std::to_string(c.world) + "_s" + std::to_string(c.stage) +
         (c.overlap ? "_overlap" : "") + "_bucket" + std::to_string(c.bucket_numel) + "_" +
         std::string(dtype_name(c.wire));
}

class GradReducerWorlds : public ::testing::TestWithParam<Case> {};

TEST_P(GradReducerWorlds, PartitionIsTheSumOverRanksAndMicroSteps) {
  const Case c = GetParam();
  auto config = model::preset_model_config("gpt2-tiny");
  ASSERT_TRUE(config.ok());
  const model::ModelLayout layout(*config);
  constexpr int kMicroSteps = 2;
  // 16-bit wire: each rank's contribution is rounded to bf16 before the sum, and the sum is
  // rounded again; values here are at most ~1.5 per term.
  const double tol = c.wire == DType::kF32 ? 1e-5 : 0.05;
  std::atomic<int> bad{0};
  std::atomic<int> checked{0};
  ThreadCommunicator::run(c.world, [&](Communicator& comm) {
    const ShardLayout shards(layout, comm.world_size(), comm.rank());
    ZeroOptions o;
    o.stage = c.stage;
    o.overlap_comm = c.overlap;
    o.reduce_bucket_numel = c.bucket_numel;
    o.comm_dtype = c.wire;
    MemoryAccounting memory;
    GradReducer reducer(shards, comm, o, memory);
    reducer.begin_step(kMicroSteps);
    for (int m = 0; m < kMicroSteps; ++m) {
      reducer.begin_micro_step(m);
      for (int u = layout.num_units() - 1; u >= 0; --u) {  // backward order
        float* g = reducer.grad_buffer(u);
        for (int64_t i = 0; i < shards.unit(u).numel; ++i) g[i] = grad_value(comm.rank(), m, u, i);
        reducer.grad_ready(u);
      }
    }
    if (!reducer.finish_step().ok()) {
      ++bad;
      return;
    }
    for (int u = 0; u < layout.num_units(); ++u) {
      const int64_t begin = reducer.partition_begin(u), n = reducer.partition_numel(u);
      const float* p = reducer.partition(u);
      for (int64_t k = 0; k < n; ++k) {
        const int64_t i = begin + k;
        double want = 0.0;
        if (i < shards.unit(u).numel) {
          for (int r = 0; r < comm.world_size(); ++r) {
            for (int m = 0; m < kMicroSteps; ++m) want += grad_value(r, m, u, i);
          }
        }
        if (std::abs(p[k] - want) > tol) ++bad;
        ++checked;
      }
    }
  });
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(checked.load(), 0);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int world : {1, 2, 3, 4}) {
    for (int stage : {0, 1, 2, 3}) {
      for (bool overlap : {false, true}) {
        // 2048: several small units share a bucket (rank-major packing); larger units go alone.
        for (int64_t bucket : {int64_t{2048}, int64_t{500'000'000}}) {
          out.push_back({world, stage, overlap, bucket, DType::kF32});
        }
      }
      out.push_back({world, stage, true, 2048, DType::kBF16});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(ThreadRanks, GradReducerWorlds, ::testing::ValuesIn(cases()), case_name);

// A bf16 model's gradient is rounded to bf16 once per micro-step before it is accumulated, at every
// stage and wire dtype, also in a world of one: stages 2-3 leave the rounding to a 16-bit wire, so
// a world of one must still go through it (issue() reduces alone only over an fp32 wire).
TEST(GradReducerWorldOfOne, SixteenBitModelRoundsEachMicroStep) {
  auto config = model::preset_model_config("gpt2-tiny");
  ASSERT_TRUE(config.ok());
  const model::ModelLayout layout(*config);
  // grad_value's k/64 steps are exact in bf16: scale them off the bf16 grid.
  const auto fine_value = [](int m, int u, int64_t i) { return grad_value(0, m, u, i) * 1.0013f; };
  ThreadCommunicator::run(1, [&](Communicator& comm) {
    const ShardLayout shards(layout, 1, 0);
    for (DType wire : {DType::kBF16, DType::kF32}) {
      for (int stage : {0, 1, 2, 3}) {
        ZeroOptions o;
        o.stage = stage;
        o.model_dtype = DType::kBF16;
        o.comm_dtype = wire;
        MemoryAccounting memory;
        GradReducer reducer(shards, comm, o, memory);
        reducer.begin_step(2);
        for (int m = 0; m < 2; ++m) {
          reducer.begin_micro_step(m);
          for (int u = layout.num_units() - 1; u >= 0; --u) {
            float* g = reducer.grad_buffer(u);
            for (int64_t i = 0; i < shards.unit(u).numel; ++i) g[i] = fine_value(m, u, i);
            reducer.grad_ready(u);
          }
        }
        ASSERT_TRUE(reducer.finish_step().ok());
        for (int u = 0; u < layout.num_units(); ++u) {
          const float* p = reducer.partition(u);
          for (int64_t i = 0; i < shards.unit(u).numel; ++i) {
            const float want = round_to_dtype(fine_value(0, u, i), DType::kBF16) +
                               round_to_dtype(fine_value(1, u, i), DType::kBF16);
            ASSERT_EQ(p[i], want) << "stage " << stage << " wire " << dtype_name(wire) << " unit "
                                  << u << " element " << i;
          }
        }
      }
    }
  });
}

// Issue 14: with the default 5e8 bucket every unit was packed into one bucket per micro-step, the
// embedding included (a 51 MB copy per micro-step for a 50257 x 256 one, 4% of a stage-3 world-2
// rank). A unit of at least kAloneNumel is reduced alone from its own buffer: one more call per
// micro-step, the same bytes and the same sums, and the packed bucket (transient) holds only the
// small units.
TEST(GradReducerBuckets, LargeUnitsAreReducedAloneNotPacked) {
  auto config = model::preset_model_config("gpt2-tiny");
  ASSERT_TRUE(config.ok());
  config->vocab_size = 4096;  // embedding 4096 x 64 = 2^18 elements: a large unit
  const model::ModelLayout layout(*config);
  constexpr int kMicroSteps = 2;
  std::atomic<int> bad{0};
  std::atomic<int64_t> calls{0}, bytes{0}, large_units{0}, total_numel{0};
  ThreadCommunicator::run(2, [&](Communicator& comm) {
    const ShardLayout shards(layout, comm.world_size(), comm.rank());
    ZeroOptions o;
    o.stage = 3;
    o.reduce_bucket_numel = 500'000'000;
    MemoryAccounting memory;
    GradReducer reducer(shards, comm, o, memory);
    comm.reset_stats();
    reducer.begin_step(kMicroSteps);
    for (int m = 0; m < kMicroSteps; ++m) {
      reducer.begin_micro_step(m);
      for (int u = layout.num_units() - 1; u >= 0; --u) {
        float* g = reducer.grad_buffer(u);
        for (int64_t i = 0; i < shards.unit(u).numel; ++i) g[i] = grad_value(comm.rank(), m, u, i);
        reducer.grad_ready(u);
      }
    }
    if (!reducer.finish_step().ok()) ++bad;
    for (int u = 0; u < layout.num_units(); ++u) {
      const float* p = reducer.partition(u);
      const int64_t begin = shards.shard_begin(u);
      for (int64_t k = 0; k < shards.unit(u).shard_numel && begin + k < shards.unit(u).numel; ++k) {
        float want = 0.0f;
        for (int m = 0; m < kMicroSteps; ++m) {
          want += grad_value(0, m, u, begin + k) + grad_value(1, m, u, begin + k);
        }
        if (p[k] != want) ++bad;
      }
    }
    if (comm.rank() == 0) {
      calls = comm.stats()[CommKind::kReduceScatter].calls;
      bytes = comm.stats()[CommKind::kReduceScatter].bytes;
      for (int u = 0; u < layout.num_units(); ++u) {
        total_numel += shards.unit(u).padded_numel;
        if (shards.unit(u).padded_numel >= GradReducer::kAloneNumel) ++large_units;
      }
    }
  });
  EXPECT_EQ(bad.load(), 0);
  ASSERT_EQ(large_units.load(), 1);
  // Per micro-step: the embedding alone, then one bucket of the rest.
  EXPECT_EQ(calls.load(), kMicroSteps * 2);
  EXPECT_EQ(bytes.load(), kMicroSteps * total_numel.load() * 4);
}

// Issue 14: in a world of one a bucket was packed into one buffer, "reduced" into a second and
// unpacked: two copies of every gradient per micro-step and 3x the transient memory, for a sum over
// one rank. The reduction is now done in place: the transient memory is the backward's own
// buffers, the counters still show the collective (same calls and bytes), the sums are exact.
TEST(GradReducerWorldOfOne, ReducesInPlaceAndCountsTheCollective) {
  auto config = model::preset_model_config("gpt2-tiny");
  ASSERT_TRUE(config.ok());
  const model::ModelLayout layout(*config);
  constexpr int kMicroSteps = 2;
  ThreadCommunicator::run(1, [&](Communicator& comm) {
    const ShardLayout shards(layout, 1, 0);
    int64_t total_numel = 0, distinct_numel = 0;
    std::set<int64_t> sizes;
    for (int u = 0; u < layout.num_units(); ++u) {
      total_numel += shards.unit(u).padded_numel;
      if (sizes.insert(shards.unit(u).padded_numel).second) {
        distinct_numel += shards.unit(u).padded_numel;
      }
    }
    for (int stage : {0, 1, 2, 3}) {
      ZeroOptions o;
      o.stage = stage;
      o.reduce_bucket_numel = 500'000'000;  // one bucket: the packing case
      MemoryAccounting memory;
      GradReducer reducer(shards, comm, o, memory);
      comm.reset_stats();
      reducer.begin_step(kMicroSteps);
      for (int m = 0; m < kMicroSteps; ++m) {
        reducer.begin_micro_step(m);
        for (int u = layout.num_units() - 1; u >= 0; --u) {
          float* g = reducer.grad_buffer(u);
          for (int64_t i = 0; i < shards.unit(u).numel; ++i) g[i] = grad_value(0, m, u, i);
          reducer.grad_ready(u);
        }
      }
      ASSERT_TRUE(reducer.finish_step().ok());
      for (int u = 0; u < layout.num_units(); ++u) {
        const float* p = reducer.partition(u);
        for (int64_t i = 0; i < shards.unit(u).numel; ++i) {
          ASSERT_EQ(p[i], grad_value(0, 0, u, i) + grad_value(0, 1, u, i))
              << "stage " << stage << " unit " << u;
        }
      }
      // Stages 0-1 hand each micro-step buffer back at once, so the pool keeps one buffer per
      // distinct unit size; stages 2-3 hold them until the bucket is reduced. Before: plus the
      // packed bucket and its output.
      const int64_t want_transient = (stage >= 2 ? total_numel : distinct_numel) * 4;
      EXPECT_EQ(memory.peak_transient_grad_bytes, want_transient) << "stage " << stage;
      const CommStats s = comm.stats();
      const CommKind kind = stage == 0 ? CommKind::kAllReduce : CommKind::kReduceScatter;
      const int64_t calls = stage >= 2 ? kMicroSteps : 1;
      EXPECT_EQ(s[kind].calls, calls) << "stage " << stage;
      EXPECT_EQ(s[kind].bytes, calls * total_numel * 4) << "stage " << stage;
    }
  });
}

}  // namespace
}  // namespace zero::sharding
