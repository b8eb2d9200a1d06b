// Host gradients on the (emulated) GPU, issue 27: with offload_optimizer cpu at stages 2 and 3 on
// the device path, each rank's fp32 gradient partitions live in page-locked host memory; every
// micro-step's reduced shard is added to them through a pooled device buffer on the reducer's copy
// stream (sharding/grad_reducer.h), and the CPU Adam reads them in place. Against the same run with
// the partitions resident on the device (EngineOptions::offload_gradients = false, the reference:
// the same ops in the same order, only where the partitions wait changes), the loss and
// gradient-norm curves and the final master weights must be bitwise equal; the resident run itself
// follows the CPU engine (cuda_engine_emu_test.cc). A device budget (ZERO_DEVICE_MEMORY_LIMIT)
// below what the resident partitions need still trains.
#include "emu/cuda_emu.h"
// The emulator header must come first: it redefines the CUDA runtime calls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "comm/thread_communicator.h"
#include "core/device_memory_budget.h"
#include "core/storage.h"
#include "data/token_dataset.h"
#include "emu/engine_emu_testing.h"
#include "model/hf_checkpoint.h"
#include "model/model_config.h"
#include "optim/optimizer_spec.h"
#include "runtime/engine.h"
#include "runtime/memory_plan.h"

namespace zero::runtime {
namespace {

using testing::case_config;
using testing::case_init;
using testing::kDeep;
using testing::kDeeper;
const std::string& kGolden = testing::kGoldenDir;
constexpr int kSteps = 3;
constexpr int64_t kGlobalBatch = 4, kSeq = 16;

struct Case {
  const char* model;
  int stage;
  int world;
  DType dtype;
  int gas;             // micro-steps per optimizer step
  bool offload_param;  // offload_param cpu (stage 3)
  int steps = kSteps;  // optimizer steps
};

std::string case_name(const Case& c) {
  return std::string(c.model) + "_s" + std::to_string(c.stage) + "_w" + std::to_string(c.world) +
         "_" + std::string(dtype_name(c.dtype)) + "_gas" + std::to_string(c.gas) +
         (c.offload_param ? "_offloadparam" : "");
}

void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

struct RunResult {
  std::vector<double> loss, grad_norm;
  // Every rank's partitions of every unit's master weights after the last step, rank-major.
  std::vector<float> master;
  bool gradients_on_host = false;  // rank 0's engine
  int64_t pinned_bytes = 0;        // rank 0's page-locked host bytes
  int64_t device_used_bytes = 0;   // the most any rank's emulated device held after the steps
  int64_t zero_device_bytes = 0;   // rank 0's ZeRO state on the device (memory().device_bytes)
  std::string placement;
};

using Adjust = std::function<void(EngineOptions&)>;

// c.steps optimizer steps (kSteps unless the case says) of the global batch kGlobalBatch x kSeq
// (the golden token stream) over c.world ranks on the emulated GPU, each rank's share in c.gas
// micro-batches, offload_optimizer cpu; `host_grads`: EngineOptions::offload_gradients.
RunResult run(const Case& c, bool host_grads, const Adjust& adjust = {}) {
  RunResult out;
  std::mutex mu;
  std::vector<std::vector<float>> masters(static_cast<size_t>(c.world));
  ThreadCommunicator::run(c.world, [&](Communicator& comm) {
    EngineOptions o;
    auto config = case_config(c.model);
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    o.model_config = *config;
    o.device = Device::kCuda;
    o.dtype = c.dtype;
    o.optimizer = *optim::optimizer_spec_from_json(
        "AdamW", {{"lr", 1e-2}, {"betas", {0.9, 0.95}}, {"eps", 1e-8}, {"weight_decay", 0.1}});
    o.schedule = optim::LrSchedule::constant(1e-2);
    o.gradient_clipping = 1.0;
    o.zero.stage = c.stage;
    o.zero.param_persistence_threshold_numel = 0;
    o.offload.optimizer = OptimizerOffload::kCpu;
    if (c.offload_param) o.offload.param.device = sharding::ParamOffload::kCpu;
    o.offload_gradients = host_grads;
    o.check_memory = false;
    if (adjust) adjust(o);
    model::ModelLayout layout(o.model_config);
    std::unique_ptr<model::HfWeightReader> reader;
    const UnitInitFn init = case_init(c.model, layout, &reader);
    ASSERT_TRUE(init);
    auto engine = Engine::create(std::move(o), init, &comm);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    Engine& e = **engine;
    ASSERT_TRUE(e.state_on_device());
    ASSERT_TRUE(e.offload_on_device());
    EXPECT_EQ(e.gradients_on_host(), host_grads);
    TokenDatasetOptions dopts;
    dopts.block_size = kSeq;
    dopts.vocab_size = e.options().model_config.vocab_size;
    auto data = TokenDataset::open(*default_storage(), kGolden + "tokens.bin", dopts);
    ASSERT_TRUE(data.ok()) << data.status().to_string();
    const int64_t per_rank = kGlobalBatch / c.world, per_micro = per_rank / c.gas;
    for (int s = 0; s < c.steps; ++s) {
      std::vector<MicroBatch> micro(static_cast<size_t>(c.gas));
      for (int m = 0; m < c.gas; ++m) {
        MicroBatch& mb = micro[static_cast<size_t>(m)];
        mb.batch = per_micro;
        mb.seq = kSeq;
        mb.tokens.resize(static_cast<size_t>(per_micro * kSeq));
        mb.targets.resize(mb.tokens.size());
        for (int64_t i = 0; i < per_micro; ++i) {
          const int64_t g = s * kGlobalBatch + comm.rank() * per_rank + m * per_micro + i;
          ASSERT_TRUE(data->get_sample(g % data->num_samples(), mb.tokens.data() + i * kSeq,
                                       mb.targets.data() + i * kSeq)
                          .ok());
        }
      }
      auto step = e.train_step(micro);
      ASSERT_TRUE(step.ok()) << step.status().to_string();
      if (comm.rank() == 0) {
        std::lock_guard<std::mutex> lock(mu);
        out.loss.push_back(step->loss);
        out.grad_norm.push_back(step->grad_norm);
      }
    }
    std::vector<float>& mine = masters[static_cast<size_t>(comm.rank())];
    for (int u = 0; u < e.layout().num_units(); ++u) {
      std::vector<float> part(static_cast<size_t>(e.partition_numel(u)));
      ASSERT_TRUE(e.read_partition_state(u, part.data(), nullptr, nullptr).ok());
      mine.insert(mine.end(), part.begin(), part.end());
    }
    const auto used = static_cast<int64_t>(emu::device_used_bytes(comm.rank()));
    std::lock_guard<std::mutex> lock(mu);
    out.device_used_bytes = std::max(out.device_used_bytes, used);
    if (comm.rank() == 0) {
      out.gradients_on_host = e.gradients_on_host();
      out.pinned_bytes = e.memory().pinned_bytes;
      out.zero_device_bytes = e.memory().device_bytes;
      out.placement = e.placement().line();
    }
  });
  for (const auto& m : masters) out.master.insert(out.master.end(), m.begin(), m.end());
  return out;
}

// This rank's fp32 gradient partitions (what the resident run keeps on the device).
int64_t partition_bytes(const char* model_name, int world) {
  auto config = case_config(model_name);
  EXPECT_TRUE(config.ok());
  model::ModelLayout layout(*config);
  const sharding::ShardLayout shards(layout, world, 0);
  int64_t n = 0;
  for (int u = 0; u < shards.num_units(); ++u) n += shards.unit(u).shard_numel;
  return n * static_cast<int64_t>(sizeof(float));
}

class OffloadGradsOnEmulator : public ::testing::TestWithParam<Case> {};

void expect_bitwise(const RunResult& got, const RunResult& resident) {
  ASSERT_EQ(got.loss.size(), resident.loss.size());
  ASSERT_FALSE(got.loss.empty());
  EXPECT_EQ(got.loss, resident.loss);
  EXPECT_EQ(got.grad_norm, resident.grad_norm);
  ASSERT_EQ(got.master.size(), resident.master.size());
  EXPECT_TRUE(got.master == resident.master) << "final master weights differ";
}

TEST_P(OffloadGradsOnEmulator, IsBitwiseTheResidentGradientRun) {
  const Case c = GetParam();
  const RunResult resident = run(c, /*host_grads=*/false);
  const RunResult got = run(c, /*host_grads=*/true);
  expect_bitwise(got, resident);
  EXPECT_TRUE(got.gradients_on_host);
  // The partitions moved to page-locked host memory (the device's savings: the budget test; on
  // these few small units the pooled bucket buffers weigh as much).
  const int64_t partitions = partition_bytes(c.model, c.world);
  EXPECT_GE(got.pinned_bytes - resident.pinned_bytes, partitions);
  EXPECT_NE(got.placement.find("gradients page-locked host memory"), std::string::npos)
      << got.placement;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int stage : {2, 3}) {
    for (int world : {1, 2}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        for (int gas : {1, 2}) {
          out.push_back({"gpt2_tiny", stage, world, dtype, gas, false});
          if (stage == 3) out.push_back({"gpt2_tiny", stage, world, dtype, gas, true});
        }
      }
    }
  }
  // Llama's units (q/k/v/o, gated MLP, no biases).
  out.push_back({"llama_tiny", 2, 2, DType::kBF16, 2, false});
  out.push_back({"llama_tiny", 3, 1, DType::kF32, 2, true});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Ladder, OffloadGradsOnEmulator, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return case_name(info.param);
                         });

// Small buckets (one unit each), overlap_comm and a 16-bit wire: buckets stay in flight on the
// copy stream while backward goes on, still bitwise.
TEST_F(OffloadGradsOnEmulator, SmallBucketsOverlapAndA16BitWireAreBitwise) {
  for (int world : {1, 2}) {
    SCOPED_TRACE(world);
    const Case c{"gpt2_tiny", 2, world, DType::kBF16, 2, false};
    const Adjust adjust = [](EngineOptions& o) {
      o.zero.reduce_bucket_numel = 1;
      o.zero.overlap_comm = true;
      o.zero.comm_dtype = DType::kBF16;
    };
    expect_bitwise(run(c, true, adjust), run(c, false, adjust));
  }
}

// The overlapped CPU Adam (--offload_overlap, no clipping): the worker reads each host partition
// once its copy landed, no download; bitwise the after-backward run with resident gradients.
TEST_F(OffloadGradsOnEmulator, OverlappedCpuAdamReadsTheHostPartitions) {
  for (int world : {1, 2}) {
    SCOPED_TRACE(world);
    const Case c{"gpt2_tiny", 2, world, DType::kBF16, 2, false};
    const Adjust overlap = [](EngineOptions& o) {
      o.gradient_clipping = 0.0;
      o.offload_overlap = true;
    };
    const Adjust after_backward = [](EngineOptions& o) { o.gradient_clipping = 0.0; };
    expect_bitwise(run(c, true, overlap), run(c, false, after_backward));
  }
}

// The budget: ZERO_DEVICE_MEMORY_LIMIT below what the resident-gradient run holds on its device by
// half its gradient partitions (a deeper model, buckets of one unit: reduce_bucket_size at the
// largest unit). The
// resident run's device bytes exceed it; with host gradients (and offload_param, ZeRO-Infinity's
// layout) the run trains under it, bitwise.
TEST_F(OffloadGradsOnEmulator, TrainsUnderADeviceBudgetTheResidentGradientsExceed) {
  const char* model_name = kDeeper;
  auto config = case_config(model_name);
  ASSERT_TRUE(config.ok());
  model::ModelLayout layout(*config);
  int64_t max_numel = 0;
  for (int u = 0; u < layout.num_units(); ++u)
    max_numel = std::max(max_numel, layout.unit(u).numel);
  const Adjust tight = [max_numel](EngineOptions& o) {
    o.zero.max_live_numel = 2 * max_numel;
    o.zero.max_reuse_distance_numel = 0;
    o.zero.prefetch_bucket_numel = 1;
    o.zero.reduce_bucket_numel = max_numel;
  };
  // One optimizer step (two micro-steps): the device's peak is the first step's (CI time: the
  // 24-block model's three steps took 53 s on the emulator).
  const Case c{model_name, 3, 1, DType::kBF16, 2, true, 1};
  const RunResult resident = run(c, false, tight);
  const int64_t limit = resident.device_used_bytes - partition_bytes(model_name, 1) / 2;
  ASSERT_GT(limit, 0);
  ::setenv(kDeviceMemoryLimitEnv, std::to_string(limit).c_str(), 1);
  const RunResult got = run(c, true, tight);
  ::unsetenv(kDeviceMemoryLimitEnv);
  EXPECT_LE(got.device_used_bytes, limit);
  EXPECT_GT(resident.device_used_bytes, limit);
  expect_bitwise(got, resident);
}

// The device plan counts the buckets in flight, not the partitions; the host plan the partitions.
TEST(OffloadGradsMemoryPlan, CountsBucketsOnTheDevice) {
  auto config = case_config(kDeep);
  ASSERT_TRUE(config.ok());
  EngineOptions o;
  o.model_config = *config;
  o.device = Device::kCuda;
  o.dtype = DType::kBF16;
  o.zero.stage = 2;
  o.offload.optimizer = OptimizerOffload::kCpu;
  model::ModelLayout layout(o.model_config);
  const sharding::ShardLayout shards(layout, 1, 0);
  int64_t max_padded = 0;
  for (int u = 0; u < shards.num_units(); ++u)
    max_padded = std::max(max_padded, shards.unit(u).padded_numel);
  o.zero.reduce_bucket_numel = max_padded;
  ASSERT_TRUE(gradients_on_host(o, true));
  const DeviceMemoryNeeds host = plan_device_memory(o, shards, DeviceModelBytes{}, true);
  EXPECT_EQ(host.gradients, host_gradient_device_numel(o, shards) * 4);
  EXPECT_EQ(
      host_gradient_device_numel(o, shards),
      (static_cast<int64_t>(sharding::GradReducer::kHostBucketsInFlight) + 1) * max_padded * 3);
  o.offload_gradients = false;
  const DeviceMemoryNeeds resident = plan_device_memory(o, shards, DeviceModelBytes{}, true);
  EXPECT_LT(host.gradients, resident.gradients);
  EXPECT_FALSE(gradients_on_host(o, true));
  // Stage 1 keeps them on the device; no offload keeps them there.
  o.offload_gradients = true;
  o.zero.stage = 1;
  EXPECT_FALSE(gradients_on_host(o, true));
  o.zero.stage = 3;
  o.offload.optimizer = OptimizerOffload::kNone;
  EXPECT_FALSE(gradients_on_host(o, true));
  // The host plan: this rank's partitions.
  o.offload.optimizer = OptimizerOffload::kCpu;
  EXPECT_EQ(plan_memory(o, shards, 0, 0).gradient_partitions, partition_bytes(kDeep, 1));
}

}  // namespace
}  // namespace zero::runtime
