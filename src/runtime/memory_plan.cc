// Memory planning and the pre-allocation check (see memory_plan.h).
#include "runtime/memory_plan.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>

#include "model/transformer.h"
#include "offload/nvme_swapper.h"
#include "runtime/engine.h"
#include "runtime/offload_pipeline.h"
#include "sharding/grad_reducer.h"
#include "sharding/param_coordinator.h"

namespace zero::runtime {
namespace {

constexpr int64_t kFloat = 4;

int64_t read_meminfo_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t value = 0;
  std::string unit;
  while (f >> key >> value) {
    std::getline(f, unit);
    if (key == "MemAvailable:") return value * 1024;
  }
  return std::numeric_limits<int64_t>::max();
}

// cgroup v2 memory.max (a container's limit), minus what the cgroup already uses.
int64_t read_cgroup_available() {
  std::ifstream max_file("/sys/fs/cgroup/memory.max");
  std::string max_text;
  if (!(max_file >> max_text) || max_text == "max") return std::numeric_limits<int64_t>::max();
  std::ifstream cur_file("/sys/fs/cgroup/memory.current");
  int64_t current = 0;
  cur_file >> current;
  return std::max<int64_t>(0, std::stoll(max_text) - current);
}

StatusOr<int64_t> statvfs_free(const std::string& path) {
  std::filesystem::path p = path;
  std::error_code ec;
  // The swap directory may not exist yet: measure its nearest existing parent.
  while (!p.empty() && !std::filesystem::exists(p, ec)) p = p.parent_path();
  if (p.empty()) p = ".";
  struct statvfs vfs {};
  if (::statvfs(p.c_str(), &vfs) != 0) return io_error("statvfs({}) failed", p.string());
  return static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
}

std::string gib(int64_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

// One part of a memory shortfall message: what, its size, and the setting that shrinks it.
struct Part {
  const char* what;
  int64_t bytes;
  const char* remedy;
};

// Sorts `parts` largest first and lists the non-empty ones ("; what size" each), so a message can
// end with parts[0]'s remedy.
std::string sorted_breakdown(std::vector<Part>& parts) {
  std::sort(parts.begin(), parts.end(),
            [](const Part& a, const Part& b) { return a.bytes > b.bytes; });
  std::string breakdown;
  for (const Part& p : parts) {
    if (p.bytes > 0) breakdown += fmt::format("; {} {}", p.what, gib(p.bytes));
  }
  return breakdown;
}

}  // namespace

HostResources probe_host_resources() {
  HostResources r;
  r.available_ram_bytes = std::min(read_meminfo_available(), read_cgroup_available());
  r.free_disk_bytes = statvfs_free;
  return r;
}

MemoryNeeds plan_memory(const EngineOptions& o, const sharding::ShardLayout& layout,
                        int64_t micro_batch, int64_t seq_len) {
  MemoryNeeds n;
  const int stage = o.zero.stage;
  const int num_units = layout.num_units();
  int64_t sum_padded = 0, sum_shard = 0, max_padded = 0, max_shard = 0;
  for (int u = 0; u < num_units; ++u) {
    sum_padded += layout.unit(u).padded_numel;
    sum_shard += layout.unit(u).shard_numel;
    max_padded = std::max(max_padded, layout.unit(u).padded_numel);
    max_shard = std::max(max_shard, layout.unit(u).shard_numel);
  }
  // Parameters, in the model dtype, plus for 16-bit models the fp32 buffers the model widens the
  // units it uses into (the embedding and one more unit: model/param_access.h's WidenBuffer).
  const int64_t working = static_cast<int64_t>(dtype_bytes(o.dtype));
  const int64_t widened = o.dtype == DType::kF32 ? 0 : 2 * max_padded * kFloat;
  if (stage < 3) {
    n.parameters = sum_padded * working + widened;
  } else {
    // This rank's shards (ParamStore), in the model dtype in memory, staging and swap file alike.
    const sharding::ParamOffloadOptions& po = o.offload.param;
    int64_t host_shard_bytes = sum_shard * working;
    if (po.device == sharding::ParamOffload::kNvme && po.max_in_cpu_numel < sum_shard) {
      const int64_t in_cpu = std::max<int64_t>(po.max_in_cpu_numel, 0);
      const int64_t on_disk = sum_shard - in_cpu;
      const int64_t staging_bytes = std::min(po.buffer_numel, max_shard) * working;
      // + the loaded shards (read-ahead: up to four units)
      host_shard_bytes = (in_cpu + 4 * max_shard) * working + po.buffer_count * staging_bytes;
      n.swap.push_back({"zero_optimization.offload_param.nvme_path", po.nvme_path,
                        on_disk * working + num_units * 4096});
    }
    // Gathered units alive at once: the one in use, the prefetch window and the tied head's reuse.
    const int64_t gathered = sharding::planned_gathered_numel(layout, o.zero.prefetch_bucket_numel);
    n.parameters = host_shard_bytes + gathered * working + widened;
    n.param_shards = host_shard_bytes;
  }
  // Gradients: full fp32 accumulators at stages 0–1; the partition plus in-flight unit buffers at
  // stages 2–3.
  n.gradients = stage <= 1 ? sum_padded * kFloat : (sum_shard + 2 * max_padded) * kFloat;
  n.gradient_partitions = (stage == 0 ? sum_padded : sum_shard) * kFloat;
  // Master weights and moments of the partition (whole units at stage 0).
  const int64_t partition = stage == 0 ? sum_padded : sum_shard;
  const int64_t max_partition = stage == 0 ? max_padded : max_shard;
  const OffloadOptions& off = o.offload;
  const bool nvme = off.optimizer == OptimizerOffload::kNvme && stage == 3;
  // Bytes per element of the master weights and of each moment: 4, or 2 in bf16
  // (bf16_master_weights_and_grads / bf16_optimizer_states). A bf16 master installed through the
  // host coordinator is widened into one fp32 partition first (Engine::install_fn); a device takes
  // it as it is.
  const auto master_bytes = static_cast<int64_t>(dtype_bytes(o.state_dtypes.master));
  const auto moment_bytes = static_cast<int64_t>(dtype_bytes(o.state_dtypes.moments));
  const bool device_coordinator = o.device != Device::kCpu || static_cast<bool>(o.model_factory);
  const int64_t scratch =
      o.state_dtypes.master == DType::kF32 || device_coordinator ? 0 : max_partition * kFloat;
  if (nvme) {
    const int sets = 1 + (off.pipeline_read ? 1 : 0) + (off.pipeline_write ? 1 : 0);
    const double offloaded_fraction = std::clamp(off.ratio, 0.0, 1.0);
    const int64_t on_disk =
        static_cast<int64_t>(offloaded_fraction * static_cast<double>(partition));
    const int64_t in_ram = partition - on_disk;
    n.master_weights = (in_ram + sets * max_partition) * master_bytes + scratch;
    n.optimizer_state = 2 * (in_ram + sets * max_partition) * moment_bytes;
    n.swap.push_back({"zero_optimization.offload_optimizer.nvme_path", off.nvme_path,
                      on_disk * (master_bytes + 2 * moment_bytes) + 3 * num_units * 4096});
  } else {
    n.master_weights = partition * master_bytes + scratch;
    n.optimizer_state = 2 * partition * moment_bytes;
    // ZeRO-Offload overlapping backward keeps a rollback copy of both (Engine::setup_overlap).
    if (offload_overlaps_backward(o)) {
      n.master_weights *= 2;
      n.optimizer_state *= 2;
    }
  }
  // ZeRO-Offload with the model on a device (Engine::choose_state_device): the pipeline's pinned
  // double buffers, sized by the largest partition.
  const bool device_model = o.device != Device::kCpu || static_cast<bool>(o.model_factory);
  if (device_model && off.optimizer != OptimizerOffload::kNone &&
      o.optimizer.kind == optim::OptimizerKind::kAdam) {
    n.offload_buffers = OffloadPipeline::pinned_host_bytes(max_partition, o.dtype);
  }
  if (micro_batch > 0 && seq_len > 0 && o.device == Device::kCpu) {
    n.activations =
        model::Transformer::activation_bytes(o.model_config, o.transformer, micro_batch, seq_len);
  } else if (micro_batch > 0 && seq_len > 0 && o.transformer.activation_checkpointing &&
             o.transformer.checkpoints_in_host_memory) {
    // A model on a device keeps its activations there (plan_device_memory); in host memory only
    // the pinned copies of the block inputs under cpu_checkpointing, (N, C) fp32 per layer
    // (model::CudaTransformer::host_checkpoint_bytes, tested against it).
    n.activations = (CheckedInt64(o.model_config.num_layers) * micro_batch * seq_len *
                     o.model_config.hidden_size * kFloat)
                        .get()
                        .value_or(INT64_MAX);
  }
  if (o.planned_grad_accum > 0 && micro_batch > 0 && seq_len > 0) {
    // Tokens and targets (int32 each) of every micro-batch of the step, plus their headers.
    // Checked: gradient_accumulation_steps near 2^63 must be refused here, before the trainer
    // sizes a vector by it.
    constexpr int64_t kTokenAndTargetBytes = 8;
    constexpr int64_t kMicroBatchHeaderBytes = 64;
    const CheckedInt64 bytes =
        CheckedInt64(o.planned_grad_accum) * micro_batch * seq_len * kTokenAndTargetBytes +
        CheckedInt64(o.planned_grad_accum) * kMicroBatchHeaderBytes;
    n.step_batches = bytes.get().value_or(INT64_MAX);
  }
  return n;
}

Status check_memory(const MemoryNeeds& needs, int ranks_on_node, const HostResources& have) {
  const int64_t ranks = std::max(ranks_on_node, 1);
  const int64_t need = checked_mul(needs.ram(), ranks).value_or(INT64_MAX);
  if (need > have.available_ram_bytes) {
    std::vector<Part> parts = {
        {"optimizer state (Adam moments)", needs.optimizer_state,
         "offload it to NVMe (zero_optimization.offload_optimizer.device: \"nvme\", stage 3), "
         "shard it over more ranks, or keep it in bf16 (bf16.bf16_master_weights_and_grads and "
         "bf16.bf16_optimizer_states: 6 bytes per parameter instead of 12)"},
        {"master weights", needs.master_weights,
         "raise zero_optimization.stage, offload the optimizer to NVMe, or keep them in bf16 "
         "(bf16.bf16_master_weights_and_grads)"},
        {"gradients", needs.gradients, "use zero_optimization.stage 2 or 3 (sharded gradients)"},
        {"parameters", needs.parameters,
         "use zero_optimization.stage 3, or offload_param with device \"nvme\" and a smaller "
         "max_in_cpu"},
        {"activations", needs.activations,
         "lower --per_device_train_batch_size / --block_size or turn on "
         "--gradient_checkpointing"},
        {"token batches of one step", needs.step_batches,
         "lower gradient_accumulation_steps (or train_batch_size), "
         "train_micro_batch_size_per_gpu or --block_size"},
        {"pinned offload buffers", needs.offload_buffers,
         "raise zero_optimization.stage or shard over more ranks (the buffers hold the largest "
         "partition)"},
    };
    const std::string breakdown = sorted_breakdown(parts);
    return resource_exhausted(
        "not enough host memory: {} rank(s) on this node need about {} each ({} in all) but {} "
        "is available (MemAvailable / the cgroup limit){}. The largest part is the {}: {}",
        ranks, gib(needs.ram()), gib(need), gib(have.available_ram_bytes), breakdown, parts[0].what,
        parts[0].remedy);
  }
  if (have.free_disk_bytes) {
    // Directories may coincide: add up what goes to the same path.
    std::vector<MemoryNeeds::Swap> by_path;
    for (const MemoryNeeds::Swap& s : needs.swap) {
      auto it = std::find_if(by_path.begin(), by_path.end(),
                             [&](const MemoryNeeds::Swap& b) { return b.path == s.path; });
      if (it == by_path.end()) {
        by_path.push_back(s);
      } else {
        it->bytes += s.bytes;
      }
    }
    for (const MemoryNeeds::Swap& s : by_path) {
      if (s.path.empty() || s.bytes == 0) continue;
      ZERO_ASSIGN_OR_RETURN(int64_t free_bytes, have.free_disk_bytes(s.path));
      if (s.bytes * ranks > free_bytes) {
        return resource_exhausted(
            "{}: {} has {} free but the swap files of {} rank(s) on this node need {} ({} each): "
            "point it at a larger disk, or keep more in memory (offload_param.max_in_cpu, "
            "offload_optimizer.ratio)",
            s.key, s.path, gib(free_bytes), ranks, gib(s.bytes * ranks), gib(s.bytes));
      }
    }
  }
  return ok_status();
}

int64_t host_gradient_device_numel(const EngineOptions& o, const sharding::ShardLayout& layout) {
  // A bucket is one unit of at least GradReducer::kAloneNumel, or smaller units packed up to
  // reduce_bucket_size.
  int64_t max_padded = 0, sum_small = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    const int64_t padded = layout.unit(u).padded_numel;
    max_padded = std::max(max_padded, padded);
    if (padded < sharding::GradReducer::kAloneNumel) sum_small += padded;
  }
  const int64_t bucket =
      std::max(max_padded, std::min(sum_small, std::max<int64_t>(o.zero.reduce_bucket_numel, 0)));
  // Per bucket element: the micro-step buffers (or the packed input), the reduce-scatter output
  // and the device copy of the host partitions (at most a bucket each), and a 16-bit wire's
  // rounded input and output, in fp32 words; the buckets in flight plus the one backward fills.
  const int64_t wire_words = o.zero.comm_dtype == DType::kF32 ? 0 : 1;
  const auto buckets = static_cast<int64_t>(sharding::GradReducer::kHostBucketsInFlight) + 1;
  return buckets * bucket * (3 + wire_words);
}

DeviceMemoryNeeds plan_device_memory(const EngineOptions& o, const sharding::ShardLayout& layout,
                                     const DeviceModelBytes& model, bool state_on_device) {
  DeviceMemoryNeeds n;
  n.activations = model.activations;
  n.model_buffers = model.buffers;
  const int64_t working = static_cast<int64_t>(dtype_bytes(o.dtype));
  if (state_on_device) {
    // What ParamCoordinator, GradReducer and OptimizerStateStore allocate on a device.
    const int stage = o.zero.stage;
    CheckedInt64 params(0), grads(0), state(0);
    // offload_param (stage 3): the shards stay in host memory; every unit is gathered, at any
    // world size, and new values cross two slots when the update runs on the device.
    const bool params_offloaded =
        stage == 3 && o.offload.param.device != sharding::ParamOffload::kNone;
    for (int u = 0; u < layout.num_units(); ++u) {
      const int64_t padded = layout.unit(u).padded_numel, shard = layout.unit(u).shard_numel;
      if (!params_offloaded) params = params + CheckedInt64(stage == 3 ? shard : padded) * working;
      const int64_t accum = stage <= 1 ? padded : shard, reduced = stage == 1 ? shard : 0;
      grads = grads + CheckedInt64(accum + reduced + padded) * kFloat;  // + the micro-step buffer
      // offload_optimizer: master weights and moments stay in host memory (OffloadPipeline);
      // the device holds its two fp32 upload slots (below).
      if (o.offload.optimizer == OptimizerOffload::kNone)
        state =
            state + CheckedInt64(stage == 0 ? padded : shard) * o.state_dtypes.bytes_per_element();
    }
    if (gradients_on_host(o, /*state_on_device=*/true)) {
      grads = CheckedInt64(host_gradient_device_numel(o, layout)) * kFloat;
    }
    if (o.offload.optimizer != OptimizerOffload::kNone) {
      int64_t max_partition = 0;
      for (int u = 0; u < layout.num_units(); ++u)
        max_partition = std::max(
            max_partition, stage == 0 ? layout.unit(u).padded_numel : layout.unit(u).shard_numel);
      state = state + CheckedInt64(max_partition) * (2 * kFloat);
    }
    if (params_offloaded && o.offload.optimizer == OptimizerOffload::kNone) {
      params = params + CheckedInt64(sharding::offloaded_param_slot_numel(layout)) * working;
    }
    if (stage == 3 && (layout.world_size() > 1 || params_offloaded)) {
      // Gathered units alive at once, as plan_memory counts them on the host. With offload_param
      // they are all the device holds of the model, so the bound is the coordinator's own: its
      // gather buffers (kept for reuse, and units kept gathered until their reuse) stay within
      // stage3_max_live_parameters, plus the unit in use.
      int64_t gathered = sharding::planned_gathered_numel(layout, o.zero.prefetch_bucket_numel);
      if (params_offloaded) {
        int64_t sum_padded = 0, max_padded = 0;
        for (int u = 0; u < layout.num_units(); ++u) {
          sum_padded += layout.unit(u).padded_numel;
          max_padded = std::max(max_padded, layout.unit(u).padded_numel);
        }
        const int64_t live = std::max<int64_t>(o.zero.max_live_numel, 0);
        gathered = std::min(sum_padded, std::max(gathered, live + max_padded));
      }
      params = params + CheckedInt64(gathered) * working;
    }
    n.parameters = params.get().value_or(INT64_MAX);
    n.gradients = grads.get().value_or(INT64_MAX);
    n.optimizer_state = state.get().value_or(INT64_MAX);
    n.state_on_device = true;
    n.params_offloaded = params_offloaded;
    return n;
  }
  CheckedInt64 parameters(0), gradients(0);
  for (int u = 0; u < layout.num_units(); ++u) {
    parameters = parameters + CheckedInt64(layout.unit(u).padded_numel) * working;
    gradients = gradients + CheckedInt64(layout.unit(u).numel) * kFloat;
  }
  n.parameters = parameters.get().value_or(INT64_MAX);
  n.gradients = gradients.get().value_or(INT64_MAX);
  // Staging: master weights and moments stay in host memory (optimizer_state_store.h).
  n.optimizer_state = 0;
  return n;
}

Status check_device_memory(const DeviceMemoryNeeds& needs, const DeviceMemoryInfo& have) {
  const int64_t need = needs.total();
  if (need <= have.free_bytes) return ok_status();
  std::vector<Part> parts = {
      {"activations", needs.activations,
       "lower --per_device_train_batch_size (train_micro_batch_size_per_gpu) or --block_size, "
       "turn on --gradient_checkpointing, and with it activation_checkpointing.cpu_checkpointing "
       "(block inputs in pinned host memory)"},
      needs.params_offloaded
          ? Part{"parameters", needs.parameters,
                 "lower zero_optimization.stage3_max_live_parameters and "
                 "stage3_max_reuse_distance (with offload_param the GPU holds only the units "
                 "gathered at once; their buffers are kept up to the live limit)"}
      : needs.state_on_device
          ? Part{"parameters", needs.parameters,
                 "train in bf16 (bf16.enabled: half the bytes of fp32) or use zero_optimization."
                 "stage 3 (shards them over the ranks)"}
          : Part{"staged parameters", needs.parameters,
                 "train in bf16 (bf16.enabled: half the bytes of fp32); the device holds a copy of "
                 "every unit whatever zero_optimization.stage"},
      needs.state_on_device
          ? Part{"gradient buffers", needs.gradients,
                 "raise zero_optimization.stage (2 or 3 keep only this rank's shard of the "
                 "accumulated gradients)"}
          : Part{"staged gradients", needs.gradients,
                 "the device holds every unit's fp32 gradient whatever zero_optimization.stage: "
                 "use a GPU with more free memory or a smaller model"},
      {"optimizer state on the device", needs.optimizer_state,
       "raise zero_optimization.stage (shards it over the ranks) or keep it in host memory "
       "(zero_optimization.offload_optimizer.device: \"cpu\")"},
      {"model buffers (matmul workspace, fp32 widen buffers)", needs.model_buffers,
       "free memory on the GPU (other processes) or train in fp32 (no widen buffers)"},
  };
  const std::string breakdown = sorted_breakdown(parts);
  return resource_exhausted(
      "not enough memory on GPU {}: this rank needs about {} there but {} of its {} is free "
      "(cudaMemGetInfo){}. The largest part is the {}: {}",
      have.device_index, gib(need), gib(have.free_bytes), gib(have.total_bytes), breakdown,
      parts[0].what, parts[0].remedy);
}

StatusOr<DevicePlan> plan_device_memory(const EngineOptions& o, const sharding::ShardLayout& layout,
                                        device::ExecutionContext& ctx, bool state_on_device) {
  const DeviceModelBytes model = device_model_bytes(o.model_config, o.transformer, o.dtype,
                                                    o.planned_micro_batch, o.planned_seq_len, ctx);
  DevicePlan plan;
  plan.needs = plan_device_memory(o, layout, model, state_on_device);
  if (o.resources && o.resources->device_memory) {
    plan.have = *o.resources->device_memory;
  } else {
    ZERO_ASSIGN_OR_RETURN(plan.have, probe_device_memory(ctx));
  }
  return plan;
}

Status check_device_memory(const EngineOptions& o, const sharding::ShardLayout& layout,
                           device::ExecutionContext& ctx, bool state_on_device) {
  if (ctx.device() == Device::kCpu) return ok_status();
  ZERO_ASSIGN_OR_RETURN(const DevicePlan plan, plan_device_memory(o, layout, ctx, state_on_device));
  return check_device_memory(plan.needs, plan.have);
}

std::string describe_memory_plan(const MemoryNeeds& host, int ranks_on_node,
                                 const HostResources& have, const DevicePlan* device) {
  // KiB / MiB / GiB as the size asks: a tiny model's plan reads as well as a 13B one's.
  auto size = [](int64_t bytes) {
    const double b = static_cast<double>(bytes);
    if (b >= 1024.0 * 1024 * 1024) return gib(bytes);
    if (b >= 1024.0 * 1024) return fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
    return fmt::format("{:.1f} KiB", b / 1024.0);
  };
  auto parts_text = [&](std::vector<Part> parts) {
    std::sort(parts.begin(), parts.end(),
              [](const Part& a, const Part& b) { return a.bytes > b.bytes; });
    std::vector<std::string> listed;
    for (const Part& p : parts) {
      if (p.bytes > 0) listed.push_back(fmt::format("{} {}", p.what, size(p.bytes)));
    }
    return listed.empty() ? std::string() : fmt::format(" ({})", fmt::join(listed, ", "));
  };
  std::string line =
      fmt::format("host {} per rank{}{}", size(host.ram()),
                  parts_text({{"master weights", host.master_weights, ""},
                              {"optimizer state", host.optimizer_state, ""},
                              {"parameters", host.parameters, ""},
                              {"gradients", host.gradients, ""},
                              {"activations", host.activations, ""},
                              {"token batches", host.step_batches, ""},
                              {"page-locked offload buffers", host.offload_buffers, ""}}),
                  ranks_on_node > 1 ? fmt::format(" x {} ranks", ranks_on_node) : std::string());
  line += have.available_ram_bytes < std::numeric_limits<int64_t>::max()
              ? fmt::format(" of {} available", size(have.available_ram_bytes))
              : std::string();
  if (device != nullptr) {
    const DeviceMemoryNeeds& d = device->needs;
    line += fmt::format(
        "; GPU {}: {}{} of {} free ({} total)", device->have.device_index, size(d.total()),
        parts_text({{"activations", d.activations, ""},
                    {d.state_on_device ? "parameters" : "staged parameters", d.parameters, ""},
                    {d.state_on_device ? "gradient buffers" : "staged gradients", d.gradients, ""},
                    {"optimizer state", d.optimizer_state, ""},
                    {"model buffers", d.model_buffers, ""}}),
        size(device->have.free_bytes), size(device->have.total_bytes));
  }
  for (const MemoryNeeds::Swap& s : host.swap) {
    if (s.bytes > 0) line += fmt::format("; NVMe {} per rank in {}", size(s.bytes), s.path);
  }
  return line;
}

}  // namespace zero::runtime
