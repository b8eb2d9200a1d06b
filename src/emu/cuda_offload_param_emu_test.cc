// ZeRO-Infinity on the (emulated) GPU, issue 27 item 4: stage 3 with offload_param cpu / nvme on
// the device path. The shards live in page-locked host memory (or NVMe), each unit is copied to the
// device on the coordinator's copy stream and gathered there, new values are copied back. Against
// the same run with the shards resident on the device (the reference: nothing of the arithmetic
// changes, only where the shards wait), the loss and gradient-norm curves and the final master
// weights must be bitwise equal; against the CPU engine within the ladder's tolerance table
// (cuda_engine_emu_test.cc). A device budget (ZERO_DEVICE_MEMORY_LIMIT, the emulator's cudaMalloc
// counts each device's bytes) the resident run does not fit still trains with offload_param.
#include "emu/cuda_emu.h"
// The emulator header must come first: it redefines the CUDA runtime calls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
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

namespace zero::runtime {
namespace {

using testing::case_config;
using testing::case_init;
using testing::kDeep;
const std::string& kGolden = testing::kGoldenDir;
constexpr int kSteps = 3;
constexpr int64_t kGlobalBatch = 4, kSeq = 16;

struct Case {
  const char* model;
  int world;
  DType dtype;
  bool offload_optimizer;  // offload_optimizer cpu
  sharding::ParamOffload param;
  int steps = kSteps;  // optimizer steps
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.model << " world " << c.world << " " << dtype_name(c.dtype)
      << (c.offload_optimizer ? " offload_optimizer cpu" : "") << " offload_param "
      << (c.param == sharding::ParamOffload::kNvme  ? "nvme"
          : c.param == sharding::ParamOffload::kCpu ? "cpu"
                                                    : "none");
}

struct RunResult {
  std::vector<double> loss, grad_norm;
  // Every rank's partitions of every unit's master weights after the last step, rank-major.
  std::vector<float> master;
  sharding::ParamTransfers transfers;  // rank 0's
  int64_t device_used_bytes = 0;       // the most any rank's emulated device held after the steps
  int64_t zero_device_bytes = 0;       // rank 0's ZeRO state on the device (memory().device_bytes)
  std::string placement;
};

using Adjust = std::function<void(EngineOptions&)>;

// c.steps optimizer steps at stage 3 of the global batch kGlobalBatch x kSeq (the golden token
// stream) over c.world ranks on `device`.
RunResult run(const Case& c, Device device, const Adjust& adjust = {}) {
  RunResult out;
  std::mutex mu;
  const std::string nvme_dir = ::testing::TempDir() + "zero_offload_param_emu_" +
                               std::to_string(::testing::UnitTest::GetInstance()->random_seed());
  std::vector<std::vector<float>> masters(static_cast<size_t>(c.world));
  ThreadCommunicator::run(c.world, [&](Communicator& comm) {
    EngineOptions o;
    auto config = case_config(c.model);
    ASSERT_TRUE(config.ok()) << config.status().to_string();
    o.model_config = *config;
    o.device = device;
    o.dtype = c.dtype;
    o.optimizer = *optim::optimizer_spec_from_json(
        "AdamW", {{"lr", 1e-2}, {"betas", {0.9, 0.95}}, {"eps", 1e-8}, {"weight_decay", 0.1}});
    o.schedule = optim::LrSchedule::constant(1e-2);
    o.gradient_clipping = 1.0;
    o.zero.stage = 3;
    o.zero.param_persistence_threshold_numel = 0;  // every unit gathered
    if (c.offload_optimizer) o.offload.optimizer = OptimizerOffload::kCpu;
    o.offload.param.device = c.param;
    if (c.param == sharding::ParamOffload::kNvme) {
      o.offload.param.nvme_path = nvme_dir;
      // Some shards in host memory, the rest in the swap file, read in pieces of 2048 elements.
      o.offload.param.max_in_cpu_numel = 3000;
      o.offload.param.buffer_numel = 2048;
      o.offload.param.buffer_count = 3;
    }
    o.check_memory = false;
    if (adjust) adjust(o);
    model::ModelLayout layout(o.model_config);
    std::unique_ptr<model::HfWeightReader> reader;
    const UnitInitFn init = case_init(c.model, layout, &reader);
    ASSERT_TRUE(init);
    auto engine = Engine::create(std::move(o), init, &comm);
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    Engine& e = **engine;
    if (device == Device::kCuda) {
      ASSERT_TRUE(e.state_on_device());
      EXPECT_EQ(e.params_offloaded(), c.param != sharding::ParamOffload::kNone);
      EXPECT_EQ(e.staging_device_bytes(), 0);
    }
    TokenDatasetOptions dopts;
    dopts.block_size = kSeq;
    dopts.vocab_size = e.options().model_config.vocab_size;
    auto data = TokenDataset::open(*default_storage(), kGolden + "tokens.bin", dopts);
    ASSERT_TRUE(data.ok()) << data.status().to_string();
    const int64_t per_rank = kGlobalBatch / c.world;
    for (int s = 0; s < c.steps; ++s) {
      MicroBatch mb;
      mb.batch = per_rank;
      mb.seq = kSeq;
      mb.tokens.resize(static_cast<size_t>(per_rank * kSeq));
      mb.targets.resize(mb.tokens.size());
      for (int64_t i = 0; i < per_rank; ++i) {
        const int64_t g = s * kGlobalBatch + comm.rank() * per_rank + i;
        ASSERT_TRUE(data->get_sample(g % data->num_samples(), mb.tokens.data() + i * kSeq,
                                     mb.targets.data() + i * kSeq)
                        .ok());
      }
      auto step = e.train_step({mb});
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
    const auto used =
        static_cast<int64_t>(device == Device::kCuda ? emu::device_used_bytes(comm.rank()) : 0);
    std::lock_guard<std::mutex> lock(mu);
    out.device_used_bytes = std::max(out.device_used_bytes, used);
    if (comm.rank() == 0) {
      if (auto t = e.param_transfers()) out.transfers = *t;
      out.zero_device_bytes = e.memory().device_bytes;
      out.placement = e.placement().line();
    }
  });
  for (const auto& m : masters) out.master.insert(out.master.end(), m.begin(), m.end());
  std::filesystem::remove_all(nvme_dir);
  return out;
}

int64_t sum_numel(const char* model_name) {
  auto config = case_config(model_name);
  EXPECT_TRUE(config.ok());
  model::ModelLayout layout(*config);
  int64_t n = 0;
  for (int u = 0; u < layout.num_units(); ++u) n += layout.unit(u).numel;
  return n;
}

class OffloadParamOnEmulator : public ::testing::TestWithParam<Case> {
 protected:
  // The CPU reference with fp32 GEMMs on every machine (as the ladder's).
  void SetUp() override { ::setenv("ZERO_CPU_BF16_GEMM", "0", 1); }
};

// The ladder's tolerance table (cuda_engine_emu_test.cc's curve_tolerance): fp32 1e-5 / 1e-4 per
// step, bf16 (the CUDA model's autocast GEMMs against the CPU's fp32) 3e-3 / 3e-2.
struct CurveTolerance {
  double loss, grad_norm;
};
CurveTolerance curve_tolerance(DType dtype) {
  if (dtype == DType::kF32) return {1e-5, 1e-4};
  return {3e-3, 3e-2};
}

TEST_P(OffloadParamOnEmulator, IsBitwiseTheResidentRunAndFollowsTheCpuCurve) {
  const Case c = GetParam();
  Case resident_case = c;
  resident_case.param = sharding::ParamOffload::kNone;
  const RunResult resident = run(resident_case, Device::kCuda);
  const RunResult got = run(c, Device::kCuda);
  ASSERT_EQ(got.loss.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(resident.loss.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(got.loss, resident.loss);
  EXPECT_EQ(got.grad_norm, resident.grad_norm);
  ASSERT_EQ(got.master.size(), resident.master.size());
  EXPECT_TRUE(got.master == resident.master) << "final master weights differ";
  // Every step copies each unit's shard to the device at least once (forward; backward again
  // unless kept gathered) and, with the update on the device, every new shard back.
  const int64_t shard_bytes =
      sum_numel(c.model) / c.world * static_cast<int64_t>(dtype_bytes(c.dtype));
  EXPECT_GE(got.transfers.h2d_bytes, kSteps * shard_bytes);
  EXPECT_EQ(got.transfers.d2h_bytes > 0, !c.offload_optimizer);
  // The device holds no shards: less of the ZeRO state than the resident run, whose gather
  // buffers are pooled too (at world 1 the resident run lends its shards instead, and the default
  // live limit keeps every unit's buffer: the same bytes).
  if (c.world > 1) {
    EXPECT_LT(got.zero_device_bytes, resident.zero_device_bytes);
  }
  EXPECT_NE(got.placement.find("page-locked host memory (stage-3 shards, offload_param"),
            std::string::npos)
      << got.placement;
  // The CPU engine (its own offload_param: the host coordinator's store) within the table.
  const RunResult want = run(c, Device::kCpu);
  const CurveTolerance tol = curve_tolerance(c.dtype);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(got.loss[s], want.loss[s], tol.loss * std::abs(want.loss[s])) << "step " << s + 1;
    EXPECT_NEAR(got.grad_norm[s], want.grad_norm[s], tol.grad_norm * std::abs(want.grad_norm[s]))
        << "step " << s + 1;
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (int world : {1, 2}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (bool offload_optimizer : {false, true}) {
        for (auto param : {sharding::ParamOffload::kCpu, sharding::ParamOffload::kNvme}) {
          out.push_back({"gpt2_tiny", world, dtype, offload_optimizer, param});
        }
      }
    }
  }
  // Llama's units (q/k/v/o, gated MLP, no biases) at world 2.
  out.push_back({"llama_tiny", 2, DType::kBF16, false, sharding::ParamOffload::kCpu});
  out.push_back({"llama_tiny", 2, DType::kF32, true, sharding::ParamOffload::kNvme});
  return out;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return std::string(c.model) + "_w" + std::to_string(c.world) + "_" +
         std::string(dtype_name(c.dtype)) + (c.offload_optimizer ? "_offloadopt" : "") +
         (c.param == sharding::ParamOffload::kNvme ? "_nvme" : "_cpu");
}

INSTANTIATE_TEST_SUITE_P(Ladder, OffloadParamOnEmulator, ::testing::ValuesIn(cases()), case_name);

// Stage 3's live limits small enough that units are released and gathered again within a step
// (no reuse across forward and backward, a prefetch bucket of one small unit): the gather buffers
// are reused while copies into them may be queued, still bitwise the resident run.
Adjust tight_live_limits(const char* model_name) {
  auto config = case_config(model_name);
  EXPECT_TRUE(config.ok());
  model::ModelLayout layout(*config);
  int64_t max_numel = 0;
  for (int u = 0; u < layout.num_units(); ++u)
    max_numel = std::max(max_numel, layout.unit(u).numel);
  return [max_numel](EngineOptions& o) {
    o.zero.max_live_numel = 2 * max_numel;
    o.zero.max_reuse_distance_numel = 0;
    o.zero.prefetch_bucket_numel = 1;
  };
}

TEST_F(OffloadParamOnEmulator, TightLiveLimitsAreBitwiseTheResidentRun) {
  for (int world : {1, 2}) {
    SCOPED_TRACE(world);
    const Case c{"gpt2_tiny", world, DType::kBF16, false, sharding::ParamOffload::kCpu};
    Case resident_case = c;
    resident_case.param = sharding::ParamOffload::kNone;
    const Adjust tight = tight_live_limits(c.model);
    const RunResult resident = run(resident_case, Device::kCuda, tight);
    const RunResult got = run(c, Device::kCuda, tight);
    EXPECT_EQ(got.loss, resident.loss);
    EXPECT_EQ(got.grad_norm, resident.grad_norm);
    EXPECT_TRUE(got.master == resident.master) << "final master weights differ";
    // Forward and backward each copy every unit: twice the shard bytes per step, at least.
    const int64_t shard_bytes = sum_numel(c.model) / world * 2;
    EXPECT_GE(got.transfers.h2d_bytes, kSteps * 2 * shard_bytes);
  }
}

// The budget: ZERO_DEVICE_MEMORY_LIMIT set to what the resident run holds on its device less half
// the model's 16-bit weights, i.e. room for everything else (the model's workspace and
// activations, gradients) and half the weights: the resident run would be refused its buffers.
// With the live limits tight, offload_param cpu (and offload_optimizer cpu: master weights and
// moments in host memory too) trains under it, bitwise the resident run, and so does nvme.
TEST_F(OffloadParamOnEmulator, TrainsUnderADeviceBudgetTheResidentRunExceeds) {
  const char* model_name = kDeep;
  const Adjust tight = tight_live_limits(model_name);
  // One step: the device's peak is the first step's (CI time: three took 30 s on the emulator).
  const Case resident_case{model_name, 1, DType::kBF16, true, sharding::ParamOffload::kNone, 1};
  const RunResult resident = run(resident_case, Device::kCuda, tight);
  const int64_t weights_bytes = sum_numel(model_name) * 2;
  const int64_t limit = resident.device_used_bytes - weights_bytes / 2;
  ASSERT_GT(limit, 0);
  // The resident run under the budget: refused its buffers (one line, exit status 1).
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::setenv(kDeviceMemoryLimitEnv, std::to_string(limit).c_str(), 1);
        (void)run(resident_case, Device::kCuda, tight);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(1), "out of GPU memory");
  for (auto param : {sharding::ParamOffload::kCpu, sharding::ParamOffload::kNvme}) {
    SCOPED_TRACE(param == sharding::ParamOffload::kCpu ? "cpu" : "nvme");
    ::setenv(kDeviceMemoryLimitEnv, std::to_string(limit).c_str(), 1);
    const RunResult got = run({model_name, 1, DType::kBF16, true, param, 1}, Device::kCuda, tight);
    ::unsetenv(kDeviceMemoryLimitEnv);
    EXPECT_LE(got.device_used_bytes, limit);
    // The shards' bytes are what the device no longer holds, less the three units' buffers.
    EXPECT_GT(resident.device_used_bytes - got.device_used_bytes, weights_bytes / 2);
    EXPECT_EQ(got.loss, resident.loss);
    EXPECT_TRUE(got.master == resident.master) << "final master weights differ";
  }
}

// The device plan (the `zero train: memory plan:` line's GPU part): with offload_param the
// parameters are the gather buffers the live limits allow (and the two slots new values cross in
// when the update runs on the device), not the shards.
TEST(OffloadParamMemoryPlan, CountsGatherBuffersNotShards) {
  auto config = case_config(kDeep);
  ASSERT_TRUE(config.ok());
  EngineOptions o;
  o.model_config = *config;
  o.device = Device::kCuda;
  o.dtype = DType::kBF16;
  o.zero.stage = 3;
  model::ModelLayout layout(o.model_config);
  const sharding::ShardLayout shards(layout, 1, 0);
  int64_t sum_padded = 0, max_padded = 0;
  for (int u = 0; u < shards.num_units(); ++u) {
    sum_padded += shards.unit(u).padded_numel;
    max_padded = std::max(max_padded, shards.unit(u).padded_numel);
  }
  const DeviceMemoryNeeds resident = plan_device_memory(o, shards, DeviceModelBytes{}, true);
  EXPECT_EQ(resident.parameters, sum_padded * 2);  // the shards (the whole unit at world 1)
  o.offload.param.device = sharding::ParamOffload::kCpu;
  // The default live limit (1e9 elements) lets every unit stay gathered: the whole model.
  EXPECT_EQ(plan_device_memory(o, shards, DeviceModelBytes{}, true).parameters,
            (sum_padded + sharding::offloaded_param_slot_numel(shards)) * 2);
  o.zero.max_live_numel = 2 * max_padded;
  o.zero.prefetch_bucket_numel = 1;
  const DeviceMemoryNeeds offloaded = plan_device_memory(o, shards, DeviceModelBytes{}, true);
  EXPECT_TRUE(offloaded.params_offloaded);
  EXPECT_EQ(
      offloaded.parameters,
      (std::min(sum_padded, 3 * max_padded) + sharding::offloaded_param_slot_numel(shards)) * 2);
  EXPECT_LT(offloaded.parameters, resident.parameters);
  // With offload_optimizer the new values come from the host: no slots.
  o.offload.optimizer = OptimizerOffload::kCpu;
  EXPECT_EQ(plan_device_memory(o, shards, DeviceModelBytes{}, true).parameters,
            std::min(sum_padded, 3 * max_padded) * 2);
}

}  // namespace
}  // namespace zero::runtime
