// DsConfig: the typed view of an effective ds_config that the trainer reads. Every field carries
// its origin, so "auto" values that no flag resolved can be reported by name.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "config/effective.h"
#include "config/json_text.h"
#include "core/dtype.h"
#include "core/status.h"

namespace zero::config {

// One setting. When origin is kAuto the value is unset (std::nullopt for optional types, the
// default otherwise) and must be resolved before training (resolve_from_flag).
template <typename T>
struct Setting {
  T value{};
  Origin origin = Origin::kDefault;
  bool is_auto() const { return origin == Origin::kAuto; }
};

enum class OffloadDevice { kNone, kCpu, kNvme };
enum class TagValidation { kIgnore, kWarn, kFail };

struct OffloadConfig {
  Setting<OffloadDevice> device;
  Setting<std::optional<std::string>> nvme_path;
  Setting<int64_t> buffer_count;
  Setting<int64_t> buffer_size;  // offload_param only, elements
  Setting<int64_t> max_in_cpu;   // offload_param only, elements
  Setting<bool> pin_memory;
  Setting<bool> pipeline_read;   // offload_optimizer only
  Setting<bool> pipeline_write;  // offload_optimizer only
  Setting<bool> fast_init;       // offload_optimizer only
  Setting<double> ratio;         // offload_optimizer only
};

struct ZeroConfig {
  Setting<int64_t> stage;
  Setting<bool> contiguous_gradients;
  Setting<bool> reduce_scatter;
  Setting<int64_t> reduce_bucket_size;  // elements
  Setting<int64_t> allgather_bucket_size;
  Setting<bool> overlap_comm;  // resolved: DeepSpeed's None means stage == 3
  Setting<bool> load_from_fp32_weights;
  Setting<int64_t> sub_group_size;
  Setting<int64_t> prefetch_bucket_size;
  Setting<int64_t> param_persistence_threshold;
  Setting<int64_t> model_persistence_threshold;
  Setting<int64_t> max_live_parameters;
  Setting<int64_t> max_reuse_distance;
  Setting<bool> gather_16bit_weights_on_model_save;
  Setting<bool> round_robin_gradients;
  OffloadConfig offload_param;
  OffloadConfig offload_optimizer;
};

struct AioConfig {
  Setting<int64_t> block_size;  // bytes
  Setting<int64_t> queue_depth;
  Setting<int64_t> intra_op_parallelism;
  Setting<bool> single_submit;
  Setting<bool> overlap_events;
  Setting<bool> use_gds;
};

struct Fp16Config {
  Setting<bool> enabled;
  Setting<bool> auto_cast;
  Setting<double> loss_scale;  // 0 = dynamic
  Setting<int64_t> initial_scale_power;
  Setting<int64_t> loss_scale_window;
  Setting<int64_t> hysteresis;
  Setting<bool> consecutive_hysteresis;
  Setting<double> min_loss_scale;
};

// `type` is the spelling the user wrote; `params` the effective parameters (defaults filled, may
// hold "auto").
struct OptimizerConfig {
  Setting<std::optional<std::string>> type;
  Json params = Json::object();
};

struct MonitorConfig {
  Setting<bool> enabled;
  Setting<std::string> output_path;
  Setting<std::string> job_name;
};

struct CheckpointConfig {
  Setting<TagValidation> tag_validation;
  Setting<bool> use_node_local_storage;
  Setting<bool> load_universal;
};

struct ActivationCheckpointingConfig {
  Setting<bool> partition_activations;
  Setting<bool> cpu_checkpointing;
  Setting<bool> contiguous_memory_optimization;
  Setting<std::optional<int64_t>> number_checkpoints;
  Setting<bool> synchronize_checkpoint_boundary;
  Setting<bool> profile;
};

struct DsConfig {
  Setting<std::optional<int64_t>> train_batch_size;
  Setting<std::optional<int64_t>> train_micro_batch_size_per_gpu;
  Setting<std::optional<int64_t>> gradient_accumulation_steps;
  Setting<double> gradient_clipping;  // 0 = off
  Setting<std::optional<int64_t>> steps_per_print;
  Setting<bool> wall_clock_breakdown;
  Setting<bool> zero_allow_untested_optimizer;
  OptimizerConfig optimizer;
  OptimizerConfig scheduler;
  Fp16Config fp16;
  Setting<bool> bf16_enabled;
  Setting<bool> bf16_master_weights_and_grads;     // bf16 master weights (config/zero_rules.h)
  Setting<bool> bf16_optimizer_states;             // and bf16 Adam moments
  Setting<std::optional<DType>> grad_accum_dtype;  // None: model dtype
  Setting<std::optional<DType>> communication_data_type;  // None: model dtype
  ZeroConfig zero;
  AioConfig aio;
  MonitorConfig csv_monitor;
  MonitorConfig tensorboard;
  CheckpointConfig checkpoint;
  ActivationCheckpointingConfig activation_checkpointing;
};

// Reads the typed view. Fails (kInvalidArgument naming the path) only on a value of the wrong type,
// which validate_ds_config would have reported.
StatusOr<DsConfig> make_ds_config(const EffectiveConfig& config);

// Every path still "auto" (what the trainer must resolve from flags before it can start).
std::vector<std::string> unresolved_auto_paths(const EffectiveConfig& config);

}  // namespace zero::config
