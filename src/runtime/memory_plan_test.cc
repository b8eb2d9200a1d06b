// The device half of memory planning (memory_plan.h) with given resources: what a model on a GPU
// needs there (its activation slab and buffers as the model's sizing functions report them, the
// staged parameters and gradients), the check against the GPU's free memory and its message, and
// what such a run still needs in host memory (cpu_checkpointing's pinned block inputs). The sizing
// functions themselves are tested against the model's real allocation in cuda_transformer_test.
#include "runtime/memory_plan.h"

#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "model/model_config.h"
#include "model/param_layout.h"
#include "model/transformer.h"
#include "runtime/engine.h"
#include "runtime/offload_pipeline.h"

namespace zero::runtime {
namespace {

model::ModelConfig tiny_gpt2() {
  model::ModelConfig c;
  c.arch = model::Arch::kGpt2;
  c.model_type = "gpt2";
  c.vocab_size = 101;  // prime: units not multiples of anything
  c.max_position_embeddings = 32;
  c.hidden_size = 16;
  c.num_layers = 3;
  c.num_heads = 2;
  c.num_kv_heads = 2;
  c.intermediate_size = 64;
  return c;
}

EngineOptions cuda_options(DType dtype) {
  EngineOptions o;
  o.model_config = tiny_gpt2();
  o.device = Device::kCuda;
  o.dtype = dtype;
  return o;
}

// Every unit's parameters once in the model dtype (padded, as the coordinator hands them over) and
// every unit's fp32 gradient (unpadded), whatever the stage and world; the model's bytes as given.
TEST(DeviceMemoryPlan, CountsTheModelAndOneStagedCopyOfEveryUnit) {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const int world : {1, 3}) {
      for (const int stage : {0, 3}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " world " + std::to_string(world) +
                     " stage " + std::to_string(stage));
        EngineOptions o = cuda_options(dtype);
        o.zero.stage = stage;
        const model::ModelLayout model_layout(o.model_config);
        const sharding::ShardLayout layout(model_layout, world, world - 1);
        int64_t padded = 0, numel = 0;
        for (int u = 0; u < layout.num_units(); ++u) {
          padded += layout.unit(u).padded_numel;
          numel += model_layout.unit(u).numel;
        }
        const DeviceModelBytes model{.activations = 7000, .buffers = 300, .host_checkpoints = 0};
        const DeviceMemoryNeeds needs = plan_device_memory(o, layout, model);
        EXPECT_EQ(needs.activations, 7000);
        EXPECT_EQ(needs.model_buffers, 300);
        EXPECT_EQ(needs.parameters, padded * static_cast<int64_t>(dtype_bytes(dtype)));
        EXPECT_EQ(needs.gradients, numel * 4);
        EXPECT_EQ(needs.optimizer_state, 0);  // master weights and moments stay on the host
        EXPECT_EQ(needs.total(), 7000 + 300 + needs.parameters + needs.gradients);
      }
    }
  }
}

// The state on the device: no staged copies; per unit the coordinator's values (stage 3: the shard,
// plus the gathered units at world > 1), the reducer's accumulator (full unit at stages 0-1, shard
// at 2-3), the stage-1 reduced shard and a padded micro-step buffer, and master weights and both
// moments of this rank's partition (full unit at stage 0, shard otherwise), all fp32 but the
// values.
TEST(DeviceMemoryPlan, CountsTheStateOnTheDeviceByStage) {
  for (const int world : {1, 3}) {
    for (const int stage : {0, 1, 2, 3}) {
      SCOPED_TRACE("world " + std::to_string(world) + " stage " + std::to_string(stage));
      EngineOptions o = cuda_options(DType::kBF16);
      o.zero.stage = stage;
      const model::ModelLayout model_layout(o.model_config);
      const sharding::ShardLayout layout(model_layout, world, 0);
      int64_t padded = 0, shard = 0, max_padded = 0;
      for (int u = 0; u < layout.num_units(); ++u) {
        padded += layout.unit(u).padded_numel;
        shard += layout.unit(u).shard_numel;
        max_padded = std::max(max_padded, layout.unit(u).padded_numel);
      }
      const DeviceModelBytes model{.activations = 7000, .buffers = 300, .host_checkpoints = 0};
      const DeviceMemoryNeeds needs = plan_device_memory(o, layout, model, true);
      int64_t values = stage == 3 ? shard : padded;
      if (stage == 3 && world > 1) {
        values += std::min(padded, 2 * max_padded + std::min(o.zero.prefetch_bucket_numel, padded));
      }
      EXPECT_EQ(needs.parameters, values * 2);
      EXPECT_EQ(needs.gradients,
                4 * ((stage <= 1 ? padded : shard) + (stage == 1 ? shard : 0) + padded));
      EXPECT_EQ(needs.optimizer_state, 12 * (stage == 0 ? padded : shard));
      EXPECT_TRUE(needs.state_on_device);
      // A shortfall names the device-resident parts, not staged copies.
      const Status s = check_device_memory(needs, {.device_index = 0, .free_bytes = 1000});
      EXPECT_EQ(s.message().find("staged"), std::string::npos) << s.message();
      EXPECT_EQ(needs.total(),
                7000 + 300 + needs.parameters + needs.gradients + needs.optimizer_state);
      if (stage == 0) continue;
      // offload_optimizer (OffloadPipeline): master weights and moments stay in host memory; the
      // device holds two fp32 upload slots of the largest partition. Parameters are planned as
      // without offload.
      int64_t max_shard = 0;
      for (int u = 0; u < layout.num_units(); ++u)
        max_shard = std::max(max_shard, layout.unit(u).shard_numel);
      o.offload.optimizer = OptimizerOffload::kCpu;
      const DeviceMemoryNeeds off = plan_device_memory(o, layout, model, true);
      EXPECT_EQ(off.optimizer_state, 2 * 4 * max_shard);
      EXPECT_EQ(off.parameters, needs.parameters);
      // Stages 2-3 keep the gradient partitions in host memory (gradients_on_host): the device
      // holds the buckets in flight; stage 1 plans them as without offload.
      EXPECT_EQ(off.gradients,
                stage >= 2 ? host_gradient_device_numel(o, layout) * 4 : needs.gradients);
    }
  }
}

DeviceMemoryNeeds needs_of(int64_t activations, int64_t parameters, int64_t optimizer_state) {
  DeviceMemoryNeeds n;
  n.activations = activations;
  n.model_buffers = 1000;
  n.parameters = parameters;
  n.gradients = 2 * parameters;
  n.optimizer_state = optimizer_state;
  return n;
}

// Fits exactly at the free bytes (not the total: other processes' memory is not ours); one byte
// short is refused naming the GPU, the amounts and the setting that reduces the largest part.
TEST(DeviceMemoryCheck, RefusesAShortfallNamingTheGpuAndTheSettingToChange) {
  const DeviceMemoryNeeds activations_first = needs_of(int64_t{40} << 30, 1 << 20, 0);
  DeviceMemoryInfo gpu{
      .device_index = 3, .free_bytes = activations_first.total(), .total_bytes = int64_t{80} << 30};
  EXPECT_TRUE(check_device_memory(activations_first, gpu).ok());
  gpu.free_bytes -= 1;
  Status s = check_device_memory(activations_first, gpu);
  ASSERT_EQ(s.code(), StatusCode::kResourceExhausted);
  for (const char* part :
       {"not enough memory on GPU 3", "cudaMemGetInfo", "of its 80.00 GiB is free",
        "The largest part is the activations", "--per_device_train_batch_size",
        "--gradient_checkpointing", "activation_checkpointing.cpu_checkpointing"}) {
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " in: " << s.message();
  }

  // Staged gradients (2x the parameters) largest.
  const DeviceMemoryNeeds staging_first = needs_of(1 << 20, int64_t{10} << 30, 0);
  s = check_device_memory(staging_first, {.device_index = 0, .free_bytes = 1 << 30});
  ASSERT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("The largest part is the staged gradients"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("staged parameters 10.00 GiB"), std::string::npos) << s.message();

  // The optimizer state's term, once it lives on the device: the stage is the setting.
  const DeviceMemoryNeeds optimizer_first = needs_of(1 << 20, 1 << 20, int64_t{12} << 30);
  s = check_device_memory(optimizer_first, {.device_index = 0, .free_bytes = 1 << 30});
  ASSERT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("The largest part is the optimizer state on the device: raise "
                             "zero_optimization.stage"),
            std::string::npos)
      << s.message();
}

// Absurd sizes saturate instead of wrapping into a "fit".
TEST(DeviceMemoryCheck, AnOverflowingPlanIsRefused) {
  const DeviceMemoryNeeds huge = needs_of(INT64_MAX, INT64_MAX / 2, 0);
  EXPECT_EQ(huge.total(), INT64_MAX);
  EXPECT_EQ(check_device_memory(huge, {.device_index = 0, .free_bytes = int64_t{1} << 50}).code(),
            StatusCode::kResourceExhausted);
}

// A model on a GPU keeps its activations there: in host memory the plan counts only the pinned
// block inputs of cpu_checkpointing ((B*T, C) fp32 per layer); the CPU model's activations stay.
TEST(HostMemoryPlan, AModelOnADeviceNeedsHostMemoryOnlyForCpuCheckpoints) {
  EngineOptions o = cuda_options(DType::kF32);
  const model::ModelLayout model_layout(o.model_config);
  const sharding::ShardLayout layout(model_layout, 1, 0);
  const int64_t B = 4, T = 16, C = o.model_config.hidden_size, L = o.model_config.num_layers;
  EXPECT_EQ(plan_memory(o, layout, B, T).activations, 0);
  o.transformer.checkpoints_in_host_memory = true;  // without checkpointing: nothing to keep
  EXPECT_EQ(plan_memory(o, layout, B, T).activations, 0);
  o.transformer.activation_checkpointing = true;
  EXPECT_EQ(plan_memory(o, layout, B, T).activations, L * B * T * C * 4);
  EXPECT_EQ(plan_memory(o, layout, 0, 0).activations, 0);
  o.device = Device::kCpu;
  EXPECT_EQ(plan_memory(o, layout, B, T).activations,
            model::Transformer::activation_bytes(o.model_config, o.transformer, B, T));
}

// ZeRO-Offload on a device overlapping backward (offload_overlap, no clipping, bf16) keeps a
// rollback copy of the offloaded master weights and moments in host memory: the plan counts both
// twice then, once without the option, with clipping (the CPU Adam after backward) or on the CPU.
TEST(HostMemoryPlan, OffloadOverlappingBackwardCountsTheRollbackCopy) {
  EngineOptions o = cuda_options(DType::kBF16);
  o.zero.stage = 2;
  o.offload.optimizer = OptimizerOffload::kCpu;
  const model::ModelLayout model_layout(o.model_config);
  const sharding::ShardLayout layout(model_layout, 2, 0);
  int64_t shard = 0;
  for (int u = 0; u < layout.num_units(); ++u) shard += layout.unit(u).shard_numel;
  o.gradient_clipping = 1.0;
  EXPECT_FALSE(offload_overlaps_backward(o));
  EXPECT_EQ(plan_memory(o, layout, 0, 0).master_weights, 4 * shard);
  EXPECT_EQ(plan_memory(o, layout, 0, 0).optimizer_state, 8 * shard);
  o.gradient_clipping = 0.0;
  EXPECT_FALSE(offload_overlaps_backward(o));  // opt-in (--offload_overlap)
  EXPECT_EQ(plan_memory(o, layout, 0, 0).master_weights, 4 * shard);
  o.offload_overlap = true;
  EXPECT_TRUE(offload_overlaps_backward(o));
  EXPECT_EQ(plan_memory(o, layout, 0, 0).master_weights, 2 * 4 * shard);
  EXPECT_EQ(plan_memory(o, layout, 0, 0).optimizer_state, 2 * 8 * shard);
  o.device = Device::kCpu;
  EXPECT_FALSE(offload_overlaps_backward(o));
  EXPECT_EQ(plan_memory(o, layout, 0, 0).master_weights, 4 * shard);
}

// bf16 optimizer state (bf16_master_weights_and_grads / bf16_optimizer_states): 2 bytes per
// element of the partition for the master weights and for each moment (6 instead of 12; 10 with
// fp32 moments), plus, for a host parameter coordinator (the CPU model), one fp32 partition to
// widen the master into. On Llama-2-13B (one rank, stage 2, ZeRO-Offload on a GPU) that is what
// brings the state under 128 GiB of host memory: 145 GiB in fp32, 73 GiB in bf16.
TEST(HostMemoryPlan, Bf16OptimizerStateCountsSixBytesPerElement) {
  EngineOptions o = cuda_options(DType::kBF16);
  o.model_config = *model::preset_model_config("llama-13b");
  o.zero.stage = 2;
  o.offload.optimizer = OptimizerOffload::kCpu;
  const model::ModelLayout model_layout(o.model_config);
  const sharding::ShardLayout layout(model_layout, 1, 0);
  int64_t shard = 0, largest = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    shard += layout.unit(u).shard_numel;
    largest = std::max(largest, layout.unit(u).shard_numel);
  }
  EXPECT_GE(shard, 13'015'864'320);
  const MemoryNeeds fp32 = plan_memory(o, layout, 0, 0);
  EXPECT_EQ(fp32.master_weights + fp32.optimizer_state, 12 * shard);
  o.state_dtypes = {DType::kBF16, DType::kF32};
  const MemoryNeeds mixed = plan_memory(o, layout, 0, 0);
  EXPECT_EQ(mixed.master_weights, 2 * shard);
  EXPECT_EQ(mixed.optimizer_state, 8 * shard);
  o.state_dtypes = {DType::kBF16, DType::kBF16};
  const MemoryNeeds bf16 = plan_memory(o, layout, 0, 0);
  EXPECT_EQ(bf16.master_weights, 2 * shard);
  EXPECT_EQ(bf16.optimizer_state, 4 * shard);
  constexpr int64_t kGiB = int64_t{1} << 30;
  EXPECT_GT(fp32.master_weights + fp32.optimizer_state, 128 * kGiB);
  EXPECT_LT(bf16.master_weights + bf16.optimizer_state, 80 * kGiB);
  // The CPU model's host coordinator takes fp32 values: one widened partition more.
  EngineOptions cpu = o;
  cpu.device = Device::kCpu;
  EXPECT_EQ(plan_memory(cpu, layout, 0, 0).master_weights, 2 * shard + 4 * largest);
  // Kept on the device without offload: the same 6 bytes there.
  o.offload.optimizer = OptimizerOffload::kNone;
  const DeviceModelBytes model{};
  EXPECT_EQ(plan_device_memory(o, layout, model, true).optimizer_state, 6 * shard);
}

// ZeRO-Offload on a device: the OffloadPipeline's page-locked slots (two fp32 gradient slots and
// two upload slots in the model dtype, each the largest partition) are host memory the plan
// counts, exactly what the pipeline allocates; none without offload_optimizer, with offload_param
// (staging path) or for the CPU model.
TEST(HostMemoryPlan, OffloadOnADeviceCountsThePipelinesPinnedSlots) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int stage : {0, 1, 3}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " stage " << stage);
      EngineOptions o = cuda_options(dtype);
      o.zero.stage = stage;
      o.offload.optimizer = OptimizerOffload::kCpu;
      const model::ModelLayout model_layout(o.model_config);
      const sharding::ShardLayout layout(model_layout, 2, 1);
      int64_t max_partition = 0;
      for (int u = 0; u < layout.num_units(); ++u)
        max_partition = std::max(
            max_partition, stage == 0 ? layout.unit(u).padded_numel : layout.unit(u).shard_numel);
      const int64_t want =
          2 * max_partition * 4 + 2 * max_partition * (dtype == DType::kF32 ? 4 : 2);
      const MemoryNeeds needs = plan_memory(o, layout, 0, 0);
      EXPECT_EQ(needs.offload_buffers, want);
      EXPECT_EQ(needs.ram(), needs.parameters + needs.gradients + needs.master_weights +
                                 needs.optimizer_state + want);
      // What the pipeline itself allocates and accounts (CPU backend: ordinary host memory).
      StatusOr<std::unique_ptr<device::ExecutionContext>> ctx =
          device::ExecutionContext::create(Device::kCpu);
      ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
      sharding::MemoryAccounting memory;
      auto pipeline = OffloadPipeline::create(**ctx, max_partition, dtype, memory);
      ASSERT_TRUE(pipeline.ok()) << pipeline.status().to_string();
      EXPECT_EQ(memory.pinned_bytes, want);

      // offload_param (stage 3) keeps the device path and its pipeline; Lamb takes staging.
      EngineOptions infinity = o;
      infinity.offload.param.device = sharding::ParamOffload::kCpu;
      EXPECT_EQ(plan_memory(infinity, layout, 0, 0).offload_buffers, want);
      EngineOptions staging = o;
      staging.optimizer.kind = optim::OptimizerKind::kLamb;
      EXPECT_EQ(plan_memory(staging, layout, 0, 0).offload_buffers, 0);
      EngineOptions none = o;
      none.offload.optimizer = OptimizerOffload::kNone;
      EXPECT_EQ(plan_memory(none, layout, 0, 0).offload_buffers, 0);
      EngineOptions cpu_model = o;
      cpu_model.device = Device::kCpu;
      EXPECT_EQ(plan_memory(cpu_model, layout, 0, 0).offload_buffers, 0);
    }
  }
}

// The engine's glue on the CPU: nothing to check, whatever the resources say.
TEST(DeviceMemoryCheck, TheCpuHasNoDeviceMemoryToCheck) {
  EngineOptions o = cuda_options(DType::kF32);
  o.device = Device::kCpu;
  o.resources = HostResources{};
  o.resources->device_memory = DeviceMemoryInfo{.device_index = 0, .free_bytes = 0};
  const model::ModelLayout model_layout(o.model_config);
  const sharding::ShardLayout layout(model_layout, 1, 0);
  auto ctx = device::ExecutionContext::create(Device::kCpu);
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  EXPECT_TRUE(check_device_memory(o, layout, **ctx).ok());
  EXPECT_FALSE(probe_device_memory(**ctx).ok());
  const DeviceModelBytes none =
      device_model_bytes(o.model_config, o.transformer, o.dtype, 4, 16, **ctx);
  EXPECT_EQ(none.activations + none.buffers + none.host_checkpoints, 0);
}

}  // namespace
}  // namespace zero::runtime

namespace zero::runtime {
namespace {

TEST(MemoryPlanLine, ListsEachPlaceLargestPartFirstInReadableUnits) {
  MemoryNeeds host;
  host.master_weights = int64_t{52} << 30;  // a 13B model's fp32 master weights
  host.optimizer_state = int64_t{104} << 30;
  host.offload_buffers = int64_t{3} << 20;
  host.step_batches = 512;
  host.swap.push_back({"zero_optimization.offload_param.nvme_path", "/nvme", int64_t{26} << 30});
  HostResources have;
  have.available_ram_bytes = int64_t{250} << 30;
  DevicePlan device;
  device.needs.activations = int64_t{40} << 30;
  device.needs.parameters = int64_t{26} << 30;
  device.needs.state_on_device = true;
  device.have = {
      .device_index = 1, .free_bytes = int64_t{79} << 30, .total_bytes = int64_t{80} << 30};
  EXPECT_EQ(describe_memory_plan(host, 2, have, &device),
            "host 156.00 GiB per rank (optimizer state 104.00 GiB, master weights 52.00 GiB, "
            "page-locked offload buffers 3.0 MiB, token batches 0.5 KiB) x 2 ranks of 250.00 GiB "
            "available; GPU 1: 66.00 GiB (activations 40.00 GiB, parameters 26.00 GiB) of 79.00 "
            "GiB free (80.00 GiB total); NVMe 26.00 GiB per rank in /nvme");
  // One rank on the CPU: no GPU part; an unknown availability is left out.
  MemoryNeeds small;
  small.parameters = 4096;
  HostResources unknown;
  unknown.available_ram_bytes = INT64_MAX;
  EXPECT_EQ(describe_memory_plan(small, 1, unknown, nullptr),
            "host 4.0 KiB per rank (parameters 4.0 KiB)");
}

}  // namespace
}  // namespace zero::runtime
