// Memory honesty: before the engine allocates anything, what one rank will need in host memory, in
// its GPU's memory (a model on a device) and in NVMe swap space (the arithmetic of `zero estimate`
// applied to this layout, plus our buffers and the activations of the planned micro-batch),
// checked against what the machine has. A shortfall is an error naming the amount, the resource
// and the setting to change — never an unexplained OOM kill halfway through loading.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/checked_math.h"
#include "core/status.h"
#include "device/backend.h"
#include "runtime/device_model.h"
#include "sharding/shard_layout.h"

namespace zero::runtime {

struct EngineOptions;

// One rank's needs, in bytes, by class.
struct MemoryNeeds {
  int64_t parameters = 0;    // working parameters: full units (stages 0–2), shards + gathered
                             // units + NVMe staging (stage 3)
  int64_t param_shards = 0;  // of `parameters`, stage 3's shards and their NVMe staging (what
                             // host memory holds when a device gathers them: offload_param)
  int64_t gradients = 0;     // fp32 accumulators and in-flight unit buffers
  // Of those, this rank's fp32 gradient partitions (what host gradients keep in page-locked host
  // memory: runtime::gradients_on_host).
  int64_t gradient_partitions = 0;
  int64_t master_weights = 0;   // master weights kept in RAM (or their staging; fp32 or bf16)
  int64_t optimizer_state = 0;  // Adam moments kept in RAM (or their staging; fp32 or bf16)
  int64_t activations = 0;      // the planned micro-batch (0 when not known)
  int64_t step_batches = 0;     // one step's micro-batches of tokens and targets, held at once
                                // (INT64_MAX when the count overflows)
  int64_t offload_buffers = 0;  // ZeRO-Offload on a device: the OffloadPipeline's page-locked
                                // gradient and upload slots (OffloadPipeline::pinned_host_bytes)
  // The sum, saturating at INT64_MAX (absurd batch settings must read as "too much", not wrap).
  int64_t ram() const {
    return checked_sum({parameters, gradients, master_weights, optimizer_state, activations,
                        step_batches, offload_buffers})
        .value_or(INT64_MAX);
  }
  // Swap files, per directory (the optimizer's and the parameters' may differ).
  struct Swap {
    std::string key;   // "zero_optimization.offload_optimizer.nvme_path" / "...offload_param..."
    std::string path;  // the directory
    int64_t bytes = 0;
  };
  std::vector<Swap> swap;
};

// What the machine offers (a seam: tests inject small numbers).
struct HostResources {
  int64_t available_ram_bytes = 0;  // MemAvailable (/proc/meminfo) or the cgroup limit if lower
  // Free bytes of the file system holding `path` (or its nearest existing parent).
  std::function<StatusOr<int64_t>(const std::string& path)> free_disk_bytes;
  // The rank's GPU when the model runs on one (nullopt: probed, probe_device_memory).
  std::optional<DeviceMemoryInfo> device_memory;
};
HostResources probe_host_resources();

// `micro_batch` and `seq_len` (0: unknown) size the activations: the CPU model's, or for a model on
// a device (options.device) the pinned host copies of its checkpoints (cpu_checkpointing), as
// model::CudaTransformer::host_checkpoint_bytes sizes them. A device model (options.device) with
// offload_optimizer and without offload_param also counts the OffloadPipeline's pinned slots
// (offload_buffers; the engine drops them when it takes the staging path instead).
MemoryNeeds plan_memory(const EngineOptions& options, const sharding::ShardLayout& layout,
                        int64_t micro_batch, int64_t seq_len);

// RESOURCE_EXHAUSTED when `ranks_on_node` ranks each needing `needs` do not fit `have`: names the
// shortfall, the biggest consumers and the setting that would reduce them.
Status check_memory(const MemoryNeeds& needs, int ranks_on_node, const HostResources& have);

// One rank's needs in the memory of its GPU (a model on a device; one device per rank), by class.
struct DeviceMemoryNeeds {
  int64_t activations = 0;      // the model's activation slab for the planned micro-batch (0 when
                                // not known)
  int64_t model_buffers = 0;    // the model's fixed buffers: 16-bit widen buffers, matmul workspace
  int64_t parameters = 0;       // staged parameters: one device copy of every unit, model dtype
  int64_t gradients = 0;        // staged gradients: every unit's fp32 gradient
  int64_t optimizer_state = 0;  // master weights and moments kept on the device (state on device)
  // The ZeRO state is on the device (parameters / gradients are the coordinator's and reducer's
  // buffers, not staged copies): only changes what a shortfall message advises.
  bool state_on_device = false;
  // offload_param on the device path: `parameters` are gather buffers only (the advice differs).
  bool params_offloaded = false;
  // The sum, saturating at INT64_MAX.
  int64_t total() const {
    return checked_sum({activations, model_buffers, parameters, gradients, optimizer_state})
        .value_or(INT64_MAX);
  }
};

// The device plan of `options` (device != kCpu) for the model bytes `model` reports
// (device_model_bytes for the planned micro-batch): the model's memory, and on the staging path
// runtime/device_staging.h's copies: every unit's parameters (padded_numel elements in the model
// dtype, StagedParams) and fp32 gradients (numel elements, StagedGrads), whatever the stage. With
// `state_on_device` (Engine::state_on_device()) no staged copies; the coordinator's units (stage
// 3: shards and gathered units; with offload_param only the gathered units and the two slots new
// values cross in, sharding::offloaded_param_slot_numel), the reducer's accumulators and
// micro-step buffers, and this rank's partition of master weights and moments (optimizer_state)
// instead.
DeviceMemoryNeeds plan_device_memory(const EngineOptions& options,
                                     const sharding::ShardLayout& layout,
                                     const DeviceModelBytes& model, bool state_on_device = false);
// Host gradients (gradients_on_host): the fp32 elements the reducer's pooled device buffers reach
// at most, the buckets in flight (GradReducer::kHostBucketsInFlight) and the one backward fills,
// each the largest bucket (a unit of at least GradReducer::kAloneNumel, or smaller units up to
// reduce_bucket_size) times its buffers — independent of the model's size beyond its largest unit.
int64_t host_gradient_device_numel(const EngineOptions& options,
                                   const sharding::ShardLayout& layout);

// RESOURCE_EXHAUSTED when `needs` exceed the free memory of the device `have` describes: names the
// GPU, the shortfall, the biggest consumers and the setting that would reduce them.
Status check_device_memory(const DeviceMemoryNeeds& needs, const DeviceMemoryInfo& have);

// The device plan of `options` on ctx's device and what that device offers
// (options.resources->device_memory, else the probe).
struct DevicePlan {
  DeviceMemoryNeeds needs;
  DeviceMemoryInfo have;
};
StatusOr<DevicePlan> plan_device_memory(const EngineOptions& options,
                                        const sharding::ShardLayout& layout,
                                        device::ExecutionContext& ctx, bool state_on_device);

// The plan as one line for the log, printed before anything is allocated: host memory per rank
// (largest parts first, and how much of it is page-locked) against what is available for
// `ranks_on_node` ranks, the GPU's against its free memory when `device` is given, and each swap
// directory's bytes.
std::string describe_memory_plan(const MemoryNeeds& host, int ranks_on_node,
                                 const HostResources& have, const DevicePlan* device);

// The engine's device check, before the staging buffers and the model's slab are allocated: plans
// `options` on ctx's device (its model's sizing functions, the planned micro-batch) and checks it
// against options.resources->device_memory or, when that is unset, the probed free memory. OK at
// once when ctx is the CPU.
Status check_device_memory(const EngineOptions& options, const sharding::ShardLayout& layout,
                           device::ExecutionContext& ctx, bool state_on_device = false);

}  // namespace zero::runtime
