// ZeRO-Inference's flags (cli/weight_stream_flags.h).
#include "cli/weight_stream_flags.h"

#include <algorithm>

#include <fmt/format.h>

#include "config/ds_config.h"
#include "config/effective.h"
#include "config/loader.h"
#include "config/validate.h"
#include "core/check.h"
#include "model/hf_checkpoint.h"

namespace zero::cli {
namespace {

constexpr int kMinSlots = 2;

StatusOr<std::optional<int64_t>> parse_budget(const std::string& text, const char* flag) {
  if (text.empty()) return std::optional<int64_t>();
  StatusOr<uint64_t> bytes = model::parse_size_bytes(text);
  if (!bytes.ok()) return invalid_argument("{} {}: {}", flag, text, bytes.status().message());
  if (*bytes == 0 || *bytes > static_cast<uint64_t>(INT64_MAX)) {
    return invalid_argument("{} {}: expected a size above 0 bytes", flag, text);
  }
  return std::optional<int64_t>(static_cast<int64_t>(*bytes));
}

// The file's offload_param device and nvme_path (explicit values only) and its aio block.
struct FileOffload {
  std::optional<std::string> device, nvme_path;
  offload::AioConfig aio;
};

StatusOr<FileOffload> read_config_offload(const std::string& path) {
  auto loaded = config::load_ds_config_file(path);
  if (!loaded.ok()) return loaded.status();
  const config::ValidationReport report =
      config::validate_ds_config(loaded->json, {}, &loaded->sources);
  std::fputs(report.format().c_str(), stderr);
  if (!report.ok()) {
    return invalid_argument("--deepspeed_config {}: invalid DeepSpeed config ({} error{})", path,
                            report.error_count(), report.error_count() == 1 ? "" : "s");
  }
  ZERO_ASSIGN_OR_RETURN(config::EffectiveConfig effective,
                        config::build_effective_config(loaded->json));
  ZERO_ASSIGN_OR_RETURN(config::DsConfig ds, config::make_ds_config(effective));
  FileOffload f;
  const config::OffloadConfig& op = ds.zero.offload_param;
  if (op.device.origin == config::Origin::kFile) {
    f.device = op.device.value == config::OffloadDevice::kNvme  ? "nvme"
               : op.device.value == config::OffloadDevice::kCpu ? "cpu"
                                                                : "none";
  }
  if (op.nvme_path.origin == config::Origin::kFile && op.nvme_path.value) {
    f.nvme_path = *op.nvme_path.value;
  }
  // The typed aio block, as the trainer reads it (runtime/run_plan.cc).
  f.aio.block_size_bytes = static_cast<uint64_t>(ds.aio.block_size.value);
  f.aio.queue_depth = static_cast<int>(ds.aio.queue_depth.value);
  f.aio.intra_op_parallelism = static_cast<int>(ds.aio.intra_op_parallelism.value);
  f.aio.single_submit = ds.aio.single_submit.value;
  f.aio.overlap_events = ds.aio.overlap_events.value;
  f.aio.use_gds = ds.aio.use_gds.value;
  return f;
}

// `flag` (may be empty: not given) over the file's `file` value of `key`: the flag's, the file's,
// or an error when both are given and differ.
StatusOr<std::string> merged(const std::string& flag, const char* flag_name,
                             const std::optional<std::string>& file, const char* key,
                             const std::string& path) {
  if (!file || file->empty()) return flag;
  if (!flag.empty() && flag != *file) {
    return invalid_argument("{} {} contradicts {} \"{}\" in --deepspeed_config {}", flag_name, flag,
                            key, *file, path);
  }
  return *file;
}

}  // namespace

void add_weight_stream_flags(CLI::App* app, WeightStreamFlags* f) {
  app->add_option("--offload_param,--offload-param", f->offload_param,
                  "none (default) | cpu | nvme: ZeRO-Inference, the transformer blocks in pinned "
                  "host memory or in a file under --nvme_path, streamed through a few GPU slots "
                  "(copied ahead of use while the previous block computes); the embeddings, final "
                  "norm and head stay on the GPU (zero_optimization.offload_param.device)");
  app->add_option("--nvme_path,--nvme-path", f->nvme_path,
                  "with --offload_param nvme: the directory the blocks are written to (a per-run "
                  "directory under it, removed at exit)");
  app->add_option("--max_gpu_memory,--max-gpu-memory", f->max_gpu_memory,
                  "GPU memory budget, e.g. 8GiB or 500MB: the weights, key/value cache and "
                  "scratch are planned within it (with --offload_param: as many block slots as "
                  "it holds; every block resident when they all fit)");
  app->add_option("--deepspeed_config,--deepspeed-config,--deepspeed", f->deepspeed_config,
                  "a ds_config whose zero_optimization.offload_param (device, nvme_path) and aio "
                  "block place the weights as the flags above do (a flag contradicting the file "
                  "is an error)");
  app->add_option("--max_host_memory,--max-host-memory", f->max_host_memory,
                  "host memory budget for the weights, e.g. 2GiB: the resident units, pinned "
                  "blocks (cpu) or staging buffers (nvme) must fit it");
}

StatusOr<WeightStreamSettings> parse_weight_stream_flags(const WeightStreamFlags& f,
                                                         Device device) {
  WeightStreamSettings s;
  std::string offload_text = f.offload_param, nvme_path = f.nvme_path;
  if (!f.deepspeed_config.empty()) {
    ZERO_ASSIGN_OR_RETURN(FileOffload file, read_config_offload(f.deepspeed_config));
    ZERO_ASSIGN_OR_RETURN(offload_text,
                          merged(f.offload_param, "--offload_param", file.device,
                                 "zero_optimization.offload_param.device", f.deepspeed_config));
    ZERO_ASSIGN_OR_RETURN(nvme_path,
                          merged(f.nvme_path, "--nvme_path", file.nvme_path,
                                 "zero_optimization.offload_param.nvme_path", f.deepspeed_config));
    s.aio = file.aio;
  }
  if (offload_text.empty()) offload_text = "none";
  StatusOr<runtime::ParamOffload> offload = runtime::parse_param_offload(offload_text);
  if (!offload.ok()) {
    return invalid_argument("--offload_param {}", offload.status().message());
  }
  s.offload = *offload;
  ZERO_ASSIGN_OR_RETURN(s.max_gpu_bytes, parse_budget(f.max_gpu_memory, "--max_gpu_memory"));
  ZERO_ASSIGN_OR_RETURN(s.max_host_bytes, parse_budget(f.max_host_memory, "--max_host_memory"));
  s.nvme_path = nvme_path;
  s.given = s.offload != runtime::ParamOffload::kNone || s.max_gpu_bytes || s.max_host_bytes;
  if (s.offload == runtime::ParamOffload::kNvme && s.nvme_path.empty()) {
    return invalid_argument("--offload_param nvme needs --nvme_path DIR");
  }
  if (s.offload != runtime::ParamOffload::kNvme && !f.nvme_path.empty()) {
    return invalid_argument("--nvme_path is for --offload_param nvme");
  }
  if (s.offload != runtime::ParamOffload::kNvme) s.nvme_path.clear();  // a config's, unused
  if (device == Device::kCpu && s.offload == runtime::ParamOffload::kCpu) {
    return invalid_argument(
        "--offload_param cpu is for --device cuda (on the CPU the weights are in host memory "
        "already; --offload_param nvme streams them from a file)");
  }
  if (device == Device::kCpu && s.max_gpu_bytes) {
    return invalid_argument("--max_gpu_memory is for --device cuda");
  }
  return s;
}

int64_t planned_host_bytes(const runtime::WeightStreamPlan& p, Device device) {
  if (p.partitioned()) {
    // The whole units (the device's copy is made from them), then where the shards live: pinned
    // (cpu), a staging buffer per slot (nvme), or a staging buffer they pass through to the device.
    int64_t bytes = p.resident_bytes;
    if (p.offload == runtime::ParamOffload::kCpu) bytes += p.shard_bytes;
    if (p.offload == runtime::ParamOffload::kNvme) bytes += p.slots * p.max_shard_bytes;
    if (p.offload == runtime::ParamOffload::kNone) bytes += p.max_shard_bytes;
    if (device == Device::kCpu) bytes += p.slots * p.block_bytes;  // the CPU's "device" slots
    return bytes;
  }
  if (!p.streamed()) {
    // Resident: the host weights whole (the GPU's copy is made from them).
    return p.resident_bytes + p.num_blocks * p.block_bytes;
  }
  int64_t bytes = p.resident_bytes;
  if (p.offload == runtime::ParamOffload::kCpu) bytes += p.num_blocks * p.block_bytes;
  if (p.offload == runtime::ParamOffload::kNvme) bytes += p.slots * p.block_bytes;  // staging
  if (device == Device::kCpu) bytes += p.slots * p.block_bytes;  // the CPU's "device" slots
  return bytes;
}

StatusOr<runtime::WeightStreamPlan> plan_weights(const WeightStreamSettings& s, Device device,
                                                 const model::ModelConfig& config, DType dtype,
                                                 int64_t other_device_bytes, int world_size,
                                                 int rank) {
  const model::ModelLayout layout(config);
  runtime::WeightStreamPlan plan;
  if (world_size > 1) {
    ZERO_ASSIGN_OR_RETURN(
        plan, runtime::plan_partitioned_weights(layout, dtype, s.offload, s.max_gpu_bytes,
                                                device == Device::kCpu ? 0 : other_device_bytes,
                                                world_size, rank));
  } else if (device != Device::kCpu) {
    ZERO_ASSIGN_OR_RETURN(plan, runtime::plan_weight_stream(layout, dtype, s.offload,
                                                            s.max_gpu_bytes, other_device_bytes));
  } else {
    // The CPU: no device budget; NVMe's slots (each a slot and a staging buffer in host memory)
    // as many as --max_host_memory holds, else two.
    ZERO_ASSIGN_OR_RETURN(plan,
                          runtime::plan_weight_stream(layout, dtype, s.offload, std::nullopt, 0));
    if (plan.streamed() && s.max_host_bytes) {
      const int64_t fit = (*s.max_host_bytes - plan.resident_bytes) / (2 * plan.block_bytes);
      plan.slots = static_cast<int>(std::clamp<int64_t>(fit, kMinSlots, plan.num_blocks - 1));
    }
  }
  if (s.max_host_bytes) {
    const int64_t need = planned_host_bytes(plan, device);
    if (need > *s.max_host_bytes && plan.partitioned()) {
      return invalid_argument(
          "--max_host_memory {} is too small for rank {} of {}: {} bytes needed ({} bytes of "
          "whole units, {}){}",
          *s.max_host_bytes, plan.rank, plan.world_size, need, plan.resident_bytes,
          plan.offload == runtime::ParamOffload::kCpu
              ? fmt::format("{} bytes of its pinned block shards", plan.shard_bytes)
              : fmt::format("{} staging buffers of {} bytes for its shards",
                            plan.offload == runtime::ParamOffload::kNvme ? plan.slots : 1,
                            plan.max_shard_bytes),
          plan.offload == runtime::ParamOffload::kCpu ? "; --offload_param nvme holds less" : "");
    }
    if (need > *s.max_host_bytes) {
      return invalid_argument(
          "--max_host_memory {} is too small for the weights: {} bytes needed ({} resident "
          "weight bytes{}){}",
          *s.max_host_bytes, need, plan.resident_bytes,
          !plan.streamed()
              ? fmt::format(", {} blocks of {} bytes", plan.num_blocks, plan.block_bytes)
          : plan.offload == runtime::ParamOffload::kCpu
              ? fmt::format(", {} pinned blocks of {} bytes", plan.num_blocks, plan.block_bytes)
              : fmt::format(", {} buffers of {} bytes for blocks read from nvme",
                            need == plan.resident_bytes + plan.slots * plan.block_bytes
                                ? plan.slots
                                : 2 * plan.slots,
                            plan.block_bytes),
          plan.offload == runtime::ParamOffload::kNvme ? "" : "; --offload_param nvme holds less");
    }
  }
  return plan;
}

Status PlacedWeights::status() const {
  if (cpu_stream != nullptr) return cpu_stream->status();
  if (on_device != nullptr) return on_device->status();
  return ok_status();
}

StatusOr<PlacedWeights> place_weights(const runtime::WeightStreamPlan& plan,
                                      const WeightStreamSettings& settings, Device device,
                                      const model::ModelConfig& config, DType dtype,
                                      const runtime::UnitInitFn& init, DType cache_dtype,
                                      const model::TransformerOptions& model_options) {
  PlacedWeights w;
  const model::ModelLayout layout(config);
  std::function<bool(int)> keep;
  if (plan.streamed()) {
    keep = [&layout](int u) { return u == layout.embedding_unit() || u == layout.final_unit(); };
  }
  ZERO_ASSIGN_OR_RETURN(w.host, runtime::ModelWeights::load(layout, dtype, init, keep));
  // The blocks' values, read from the model source by the stream as it stores them.
  auto fill = [config, dtype, init](int u, int64_t begin, int64_t end, void* dst) {
    return runtime::ModelWeights::fill_range(model::ModelLayout(config), u, begin, end, dtype, init,
                                             dst);
  };
  if (device != Device::kCpu) {
    runtime::WeightStreaming streaming;
    if (plan.streamed()) {
      streaming.offload = plan.offload;
      streaming.slots = plan.slots;
      streaming.nvme_path = settings.nvme_path;
      streaming.aio = settings.aio;
      streaming.fill_block = fill;
    }
    ZERO_ASSIGN_OR_RETURN(w.on_device,
                          runtime::DeviceGenerator::create(device, config, *w.host, cache_dtype,
                                                           streaming, model_options));
    return w;
  }
  if (plan.streamed()) {
    w.host_ctx = device::ExecutionContext::create_host();
    runtime::StreamedParams::Options o;
    o.offload = plan.offload;
    o.slots = plan.slots;
    o.dtype = dtype;
    o.nvme_path = settings.nvme_path;
    o.aio = settings.aio;
    ZERO_ASSIGN_OR_RETURN(w.cpu_stream,
                          runtime::StreamedParams::create(layout, *w.host, fill, *w.host_ctx, o));
  }
  return w;
}

StatusOr<PlacedWeights> place_partitioned_weights(Communicator& world,
                                                  const model::ModelConfig& config, DType dtype,
                                                  const runtime::UnitInitFn& init,
                                                  DType cache_dtype,
                                                  const model::TransformerOptions& model_options,
                                                  const WeightStreamSettings& settings) {
  // Two slots whatever the budgets (no cache or scratch counted here).
  ZERO_ASSIGN_OR_RETURN(
      runtime::WeightStreamPlan plan,
      runtime::plan_partitioned_weights(model::ModelLayout(config), dtype, settings.offload,
                                        std::nullopt, 0, world.world_size(), world.rank()));
  return place_partitioned_weights(world, plan, settings, config, dtype, init, cache_dtype,
                                   model_options);
}

StatusOr<PlacedWeights> place_partitioned_weights(Communicator& world,
                                                  const runtime::WeightStreamPlan& plan,
                                                  const WeightStreamSettings& settings,
                                                  const model::ModelConfig& config, DType dtype,
                                                  const runtime::UnitInitFn& init,
                                                  DType cache_dtype,
                                                  const model::TransformerOptions& model_options) {
  ZERO_CHECK(plan.world_size == world.world_size() && plan.rank == world.rank(), "a plan of rank ",
             plan.rank, " of ", plan.world_size, " placed on rank ", world.rank(), " of ",
             world.world_size());
  PlacedWeights w;
  const model::ModelLayout layout(config);
  // The units that are not blocks whole: the embedding (often the largest unit) must be whole
  // during every forward anyway, so a shard of it would save no peak memory.
  ZERO_ASSIGN_OR_RETURN(w.host, runtime::ModelWeights::load(layout, dtype, init, [&layout](int u) {
                          return u == layout.embedding_unit() || u == layout.final_unit();
                        }));
  runtime::WeightStreaming streaming;
  streaming.world = &world;
  streaming.offload = plan.offload;
  streaming.slots = plan.slots;
  streaming.nvme_path = settings.nvme_path;
  streaming.aio = settings.aio;
  streaming.fill_block = [config, dtype, init](int u, int64_t begin, int64_t end, void* dst) {
    return runtime::ModelWeights::fill_range(model::ModelLayout(config), u, begin, end, dtype, init,
                                             dst);
  };
  ZERO_ASSIGN_OR_RETURN(
      w.on_device, runtime::DeviceGenerator::create(Device::kCuda, config, *w.host, cache_dtype,
                                                    streaming, model_options));
  return w;
}

StatusOr<PlacedWeights> place_cpu_shards(Communicator& world, const WeightStreamSettings& settings,
                                         const model::ModelConfig& config,
                                         const runtime::UnitInitFn& init) {
  runtime::GatheredParams::Options o;
  if (settings.offload == runtime::ParamOffload::kNvme) {
    o.nvme_path = settings.nvme_path;
    o.aio = settings.aio;
  }
  PlacedWeights w;
  ZERO_ASSIGN_OR_RETURN(
      w.gathered, runtime::GatheredParams::create(model::ModelLayout(config), world, init, o));
  return w;
}

std::string describe_cpu_shards(const runtime::GatheredParams& gathered) {
  if (gathered.nvme_bytes() == 0) return fmt::format("{} bytes", gathered.shard_bytes());
  return fmt::format(
      "{} bytes in host memory; its blocks' {} bytes in its own swap file under {} (nvme), read "
      "one block ahead through 2 staging buffers of {} bytes",
      gathered.shard_bytes(), gathered.nvme_bytes(), gathered.swap_dir(),
      gathered.staging_bytes() / 2);
}

Status check_ranks_stream_flags(const WeightStreamSettings& settings, Device device, int world_size,
                                std::string_view command) {
  if (world_size <= 1 || device != Device::kCpu || !settings.max_host_bytes) return ok_status();
  // --offload_param cpu and --max_gpu_memory are GPU flags (parse_weight_stream_flags refuses
  // them with --device cpu); offload_param nvme moves the block shards into each rank's swap file.
  return invalid_argument(
      "--max_host_memory on {} CPU ranks ({}): not planned there (each rank holds its fp32 shard "
      "of every unit, or with --offload_param nvme of the units that are not blocks, and gathers "
      "one unit at a time); run one rank for a host budget, or GPU ranks (--device cuda)",
      world_size, command);
}

}  // namespace zero::cli
