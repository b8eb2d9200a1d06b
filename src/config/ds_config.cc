// Typed view of the effective config (ds_config.h).
#include "config/ds_config.h"

#include <cmath>
#include <vector>

namespace zero::config {
namespace {

// Reads typed settings out of the effective JSON; the first type error is kept in `status`.
class Reader {
 public:
  explicit Reader(const EffectiveConfig& cfg) : cfg_(cfg) {}

  const Json* at(const std::string& path) const {
    const Json* node = &cfg_.json;
    size_t start = 0;
    while (true) {
      size_t dot = path.find('.', start);
      std::string key =
          path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      if (!node->is_object()) return nullptr;
      auto it = node->find(key);
      if (it == node->end()) return nullptr;
      node = &*it;
      if (dot == std::string::npos) return node;
      start = dot + 1;
    }
  }

  template <typename T>
  void read(const std::string& path, Setting<T>& out) {
    out.origin = cfg_.origin(path);
    const Json* v = at(path);
    if (v == nullptr || out.is_auto() || (v->is_string() && *v == "auto")) {
      if (v != nullptr && v->is_string() && *v == "auto") out.origin = Origin::kAuto;
      return;
    }
    if (!convert(*v, out.value)) fail(path, *v);
  }

  void read_optimizer(const std::string& block, OptimizerConfig& out) {
    read(block + ".type", out.type);
    if (const Json* p = at(block + ".params")) out.params = *p;
  }

  Status status;

 private:
  void fail(const std::string& path, const Json& v) {
    if (status.ok()) {
      status = invalid_argument("{}: unexpected value {}", path,
                                v.dump(-1, ' ', false, Json::error_handler_t::replace));
    }
  }

  static bool convert(const Json& v, bool& out) {
    if (!v.is_boolean()) return false;
    out = v.get<bool>();
    return true;
  }
  static bool convert(const Json& v, int64_t& out) {
    if (v.is_number_integer()) {
      if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}) return false;
      out = v.get<int64_t>();
      return true;
    }
    if (!v.is_number_float()) return false;
    double d = v.get<double>();
    if (std::floor(d) != d || std::fabs(d) >= 9.2e18) return false;
    out = static_cast<int64_t>(d);
    return true;
  }
  static bool convert(const Json& v, double& out) {
    if (!v.is_number()) return false;
    out = v.get<double>();
    return true;
  }
  static bool convert(const Json& v, std::string& out) {
    if (!v.is_string()) return false;
    out = v.get<std::string>();
    return true;
  }
  static bool convert(const Json& v, OffloadDevice& out) {
    if (v == "none")
      out = OffloadDevice::kNone;
    else if (v == "cpu")
      out = OffloadDevice::kCpu;
    else if (v == "nvme")
      out = OffloadDevice::kNvme;
    else
      return false;
    return true;
  }
  static bool convert(const Json& v, TagValidation& out) {
    if (!v.is_string()) return false;
    std::string s = v.get<std::string>();
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (s == "ignore")
      out = TagValidation::kIgnore;
    else if (s == "warn")
      out = TagValidation::kWarn;
    else if (s == "fail")
      out = TagValidation::kFail;
    else
      return false;
    return true;
  }
  static bool convert(const Json& v, DType& out) {
    if (!v.is_string()) return false;
    auto d = parse_dtype(v.get<std::string>());
    if (!d) return false;
    out = *d;
    return true;
  }
  template <typename T>
  static bool convert(const Json& v, std::optional<T>& out) {
    if (v.is_null()) {
      out.reset();
      return true;
    }
    T inner{};
    if (!convert(v, inner)) return false;
    out = std::move(inner);
    return true;
  }

  const EffectiveConfig& cfg_;
};

void read_offload(Reader& r, const std::string& p, OffloadConfig& o) {
  r.read(p + ".device", o.device);
  r.read(p + ".nvme_path", o.nvme_path);
  r.read(p + ".buffer_count", o.buffer_count);
  r.read(p + ".pin_memory", o.pin_memory);
  if (r.at(p + ".buffer_size") != nullptr) {
    r.read(p + ".buffer_size", o.buffer_size);
    r.read(p + ".max_in_cpu", o.max_in_cpu);
  }
  if (r.at(p + ".ratio") != nullptr) {
    r.read(p + ".pipeline_read", o.pipeline_read);
    r.read(p + ".pipeline_write", o.pipeline_write);
    r.read(p + ".fast_init", o.fast_init);
    r.read(p + ".ratio", o.ratio);
  }
}

}  // namespace

StatusOr<DsConfig> make_ds_config(const EffectiveConfig& config) {
  DsConfig c;
  Reader r(config);
  r.read("train_batch_size", c.train_batch_size);
  r.read("train_micro_batch_size_per_gpu", c.train_micro_batch_size_per_gpu);
  r.read("gradient_accumulation_steps", c.gradient_accumulation_steps);
  r.read("gradient_clipping", c.gradient_clipping);
  r.read("steps_per_print", c.steps_per_print);
  r.read("wall_clock_breakdown", c.wall_clock_breakdown);
  r.read("zero_allow_untested_optimizer", c.zero_allow_untested_optimizer);
  r.read_optimizer("optimizer", c.optimizer);
  r.read_optimizer("scheduler", c.scheduler);

  r.read("fp16.enabled", c.fp16.enabled);
  r.read("fp16.auto_cast", c.fp16.auto_cast);
  r.read("fp16.loss_scale", c.fp16.loss_scale);
  r.read("fp16.initial_scale_power", c.fp16.initial_scale_power);
  r.read("fp16.loss_scale_window", c.fp16.loss_scale_window);
  r.read("fp16.hysteresis", c.fp16.hysteresis);
  r.read("fp16.consecutive_hysteresis", c.fp16.consecutive_hysteresis);
  r.read("fp16.min_loss_scale", c.fp16.min_loss_scale);
  r.read("bf16.enabled", c.bf16_enabled);
  r.read("bf16.bf16_master_weights_and_grads", c.bf16_master_weights_and_grads);
  r.read("bf16.bf16_optimizer_states", c.bf16_optimizer_states);
  r.read("data_types.grad_accum_dtype", c.grad_accum_dtype);
  r.read("communication_data_type", c.communication_data_type);

  const std::string z = "zero_optimization";
  r.read(z + ".stage", c.zero.stage);
  r.read(z + ".contiguous_gradients", c.zero.contiguous_gradients);
  r.read(z + ".reduce_scatter", c.zero.reduce_scatter);
  r.read(z + ".reduce_bucket_size", c.zero.reduce_bucket_size);
  r.read(z + ".allgather_bucket_size", c.zero.allgather_bucket_size);
  r.read(z + ".overlap_comm", c.zero.overlap_comm);
  r.read(z + ".load_from_fp32_weights", c.zero.load_from_fp32_weights);
  r.read(z + ".sub_group_size", c.zero.sub_group_size);
  r.read(z + ".stage3_prefetch_bucket_size", c.zero.prefetch_bucket_size);
  r.read(z + ".stage3_param_persistence_threshold", c.zero.param_persistence_threshold);
  r.read(z + ".stage3_model_persistence_threshold", c.zero.model_persistence_threshold);
  r.read(z + ".stage3_max_live_parameters", c.zero.max_live_parameters);
  r.read(z + ".stage3_max_reuse_distance", c.zero.max_reuse_distance);
  r.read(z + ".stage3_gather_16bit_weights_on_model_save",
         c.zero.gather_16bit_weights_on_model_save);
  r.read(z + ".round_robin_gradients", c.zero.round_robin_gradients);
  read_offload(r, z + ".offload_param", c.zero.offload_param);
  read_offload(r, z + ".offload_optimizer", c.zero.offload_optimizer);

  r.read("aio.block_size", c.aio.block_size);
  r.read("aio.queue_depth", c.aio.queue_depth);
  r.read("aio.intra_op_parallelism", c.aio.intra_op_parallelism);
  r.read("aio.single_submit", c.aio.single_submit);
  r.read("aio.overlap_events", c.aio.overlap_events);
  r.read("aio.use_gds", c.aio.use_gds);

  r.read("csv_monitor.enabled", c.csv_monitor.enabled);
  r.read("csv_monitor.output_path", c.csv_monitor.output_path);
  r.read("csv_monitor.job_name", c.csv_monitor.job_name);
  r.read("tensorboard.enabled", c.tensorboard.enabled);
  r.read("tensorboard.output_path", c.tensorboard.output_path);
  r.read("tensorboard.job_name", c.tensorboard.job_name);
  r.read("checkpoint.tag_validation", c.checkpoint.tag_validation);
  r.read("checkpoint.use_node_local_storage", c.checkpoint.use_node_local_storage);
  r.read("checkpoint.load_universal", c.checkpoint.load_universal);

  const std::string ac = "activation_checkpointing";
  r.read(ac + ".partition_activations", c.activation_checkpointing.partition_activations);
  r.read(ac + ".cpu_checkpointing", c.activation_checkpointing.cpu_checkpointing);
  r.read(ac + ".contiguous_memory_optimization",
         c.activation_checkpointing.contiguous_memory_optimization);
  r.read(ac + ".number_checkpoints", c.activation_checkpointing.number_checkpoints);
  r.read(ac + ".synchronize_checkpoint_boundary",
         c.activation_checkpointing.synchronize_checkpoint_boundary);
  r.read(ac + ".profile", c.activation_checkpointing.profile);
  if (!r.status.ok()) return r.status;
  return c;
}

std::vector<std::string> unresolved_auto_paths(const EffectiveConfig& config) {
  std::vector<std::string> out;
  for (const auto& [path, origin] : config.origins) {
    if (origin == Origin::kAuto) out.push_back(path);
  }
  return out;
}

}  // namespace zero::config
