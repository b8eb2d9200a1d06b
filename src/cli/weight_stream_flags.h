// ZeRO-Inference's flags for `zero generate` and `zero eval`: where the transformer blocks live
// between their uses (--offload_param none|cpu|nvme, --nvme_path) and the memory budgets
// (--max_gpu_memory, --max_host_memory), or a ds_config's zero_optimization.offload_param and aio
// block (--deepspeed_config, as DeepSpeed's ZeRO-Inference configs say it), checked and planned
// (runtime::plan_weight_stream) before anything is allocated, then the weights placed as planned
// (runtime/streamed_params.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "core/device.h"
#include "core/status.h"
#include "device/backend.h"
#include "model/model_config.h"
#include "offload/aio_config.h"
#include "runtime/device_generator.h"
#include "runtime/gathered_params.h"
#include "runtime/model_weights.h"
#include "runtime/streamed_params.h"
#include "runtime/unit_init.h"

namespace zero::cli {

struct WeightStreamFlags {
  std::string offload_param;  // empty: not given (the config's, else none)
  std::string nvme_path;      // empty: not given (the config's)
  std::string deepspeed_config;
  std::string max_gpu_memory;   // empty: no budget
  std::string max_host_memory;  // empty: no budget
};
void add_weight_stream_flags(CLI::App* app, WeightStreamFlags* flags);

struct WeightStreamSettings {
  runtime::ParamOffload offload = runtime::ParamOffload::kNone;
  std::string nvme_path;
  std::optional<int64_t> max_gpu_bytes, max_host_bytes;
  offload::AioConfig aio;  // the config's aio block (the NVMe swapper's chunks, ring depth)
  // Any of the flags given: on a GPU the weights keep the checkpoint's dtype (bf16 weights are half
  // the bytes to hold and to stream) instead of the fp32 copy the GPU path makes otherwise.
  bool given = false;
};
// The flags checked against each other and `device`, with --deepspeed_config's offload_param
// device and nvme_path under them: the file validated as `zero config check` validates it (its
// report on stderr), a flag that contradicts an explicit file value an error naming both. Errors
// are one line naming the flag or key.
StatusOr<WeightStreamSettings> parse_weight_stream_flags(const WeightStreamFlags& flags,
                                                         Device device);

// The plan of a `dtype` model on `device`: on a GPU plan_weight_stream under --max_gpu_memory with
// `other_device_bytes` (key/value cache, scratch); on the CPU the blocks from NVMe through two
// slots (or as many as --max_host_memory holds). Then the host bytes this plan holds (the resident
// units, the pinned blocks of cpu, the staging of nvme, the CPU's slots) checked against
// --max_host_memory. Errors: INVALID_ARGUMENT, one line naming the bytes needed and given.
// With `world_size` > 1: rank `rank`'s plan of stage-3 inference (runtime::plan_partitioned_weights
// under --max_gpu_memory; --max_host_memory bounds its whole units and its pinned shards or
// staging): the budgets are per rank.
StatusOr<runtime::WeightStreamPlan> plan_weights(const WeightStreamSettings& settings,
                                                 Device device, const model::ModelConfig& config,
                                                 DType dtype, int64_t other_device_bytes,
                                                 int world_size = 1, int rank = 0);
// Host bytes `plan` holds on `device` (see plan_weights).
int64_t planned_host_bytes(const runtime::WeightStreamPlan& plan, Device device);

// The weights placed as `plan` says. `host` holds the units kept in host memory (all of them,
// or the ones that are not streamed blocks); on a GPU `on_device` is the device's model and
// parameters; on the CPU with NVMe, `cpu_stream` streams the blocks on a host context.
struct PlacedWeights {
  std::unique_ptr<runtime::ModelWeights> host;
  std::unique_ptr<device::ExecutionContext> host_ctx;   // cpu_stream's
  std::unique_ptr<runtime::StreamedParams> cpu_stream;  // --device cpu --offload_param nvme
  std::unique_ptr<runtime::DeviceGenerator> on_device;  // a GPU (several: the blocks partitioned)
  std::unique_ptr<runtime::GatheredParams> gathered;    // several CPU ranks: stage-3 shards
  // The CPU model's parameters: the gathered shards, the stream, or the host weights.
  model::ParamAccess& cpu_params() {
    if (gathered != nullptr) return *gathered;
    return cpu_stream != nullptr ? static_cast<model::ParamAccess&>(*cpu_stream) : *host;
  }
  // The weight stream's first error (OK when resident).
  Status status() const;
};
StatusOr<PlacedWeights> place_weights(const runtime::WeightStreamPlan& plan,
                                      const WeightStreamSettings& settings, Device device,
                                      const model::ModelConfig& config, DType dtype,
                                      const runtime::UnitInitFn& init, DType cache_dtype,
                                      const model::TransformerOptions& model_options = {});
// Stage-3 inference on several GPU ranks (`world`: the job's communicator, more than one rank):
// the embeddings, final norm and head whole in host memory (copied to the GPU once), this rank's
// shard of every block on its GPU, the blocks all-gathered into two slots as the forwards reach
// them (runtime::DeviceGenerator with WeightStreaming::world; NCCL, or staged through pinned host
// memory when the node's ranks share its GPUs). Collective: every rank calls it alike. Errors:
// reading the weights, the GPU's, the device communicator's.
// With `settings`' offload_param cpu / nvme each rank's shards live in pinned host memory / its own
// swap file under nvme_path instead of on its GPU (ZeRO-Infinity: copied up before each gather).
StatusOr<PlacedWeights> place_partitioned_weights(
    Communicator& world, const model::ModelConfig& config, DType dtype,
    const runtime::UnitInitFn& init, DType cache_dtype,
    const model::TransformerOptions& model_options = {}, const WeightStreamSettings& settings = {});
// The same as `plan` says (plan_weights with this world): its slots, where the shards live.
StatusOr<PlacedWeights> place_partitioned_weights(Communicator& world,
                                                  const runtime::WeightStreamPlan& plan,
                                                  const WeightStreamSettings& settings,
                                                  const model::ModelConfig& config, DType dtype,
                                                  const runtime::UnitInitFn& init,
                                                  DType cache_dtype,
                                                  const model::TransformerOptions& model_options);

// Stage-3 inference on several CPU ranks (`world`: the job's communicator, more than one rank):
// this rank's fp32 shard of every unit (runtime::GatheredParams, in `gathered`); with `settings`'
// offload_param nvme the blocks' shards in its own swap file under nvme_path, read back one block
// ahead of their gathers. Errors: reading the weights, the swap file's creation or writes.
StatusOr<PlacedWeights> place_cpu_shards(Communicator& world, const WeightStreamSettings& settings,
                                         const model::ModelConfig& config,
                                         const runtime::UnitInitFn& init);
// Where `gathered`'s shards live, for the plan line ("N bytes", or the host bytes, the swap file's
// and the staging's): one rank's.
std::string describe_cpu_shards(const runtime::GatheredParams& gathered);

// The weight stream flags a job of `world_size` ranks on `device` accepts: any on one rank; on
// several GPU ranks all of them (the budgets one rank's: plan_weights with the world); on several
// CPU ranks --offload_param nvme (the block shards in each rank's swap file) but no
// --max_host_memory (not planned there). Errors: INVALID_ARGUMENT naming the flag, the ranks and
// `command`.
Status check_ranks_stream_flags(const WeightStreamSettings& settings, Device device, int world_size,
                                std::string_view command);

}  // namespace zero::cli
