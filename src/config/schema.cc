// The ds_config key tables (schema.h). Sources: DeepSpeed's runtime/constants.py,
// runtime/config.py, runtime/zero/{config,offload_config}.py, monitor/config.py, the optimizer and
// lr-schedule constructors (docs/config.md lists where we differ). Blocks are defined leaves first
// so parents can point at them.
#include "config/schema.h"
#include "config/schema_builders.h"

#include <algorithm>
#include <cctype>

namespace zero::config {
namespace {

using namespace schema_builders;  // NOLINT: the tables read better unqualified
using enum Kind;

// Tables: one entry per line, so clang-format stays out.
// clang-format off
// ---- zero_optimization
// ---------------------------------------------------------------------------

constexpr KeySpec kOffloadParamKeys[] = {
    {.name = "device", .kind = kEnum, .default_json = "\"none\"", .choices = "none|cpu|nvme"},
    text("nvme_path", "null"),
    count("buffer_count", "5"),
    count("buffer_size", "100000000"),
    count("max_in_cpu", "1000000000"),
    flag("pin_memory", "false"),
};
constexpr BlockSpec kOffloadParam{"zero_optimization.offload_param", kOffloadParamKeys,
                                  UnknownKeys::kError};

constexpr KeySpec kOffloadOptimizerKeys[] = {
    {.name = "device", .kind = kEnum, .default_json = "\"none\"", .choices = "none|cpu|nvme"},
    text("nvme_path", "null"),
    count("buffer_count", "4"),
    flag("pin_memory", "false"),
    flag("pipeline_read", "false"),
    flag("pipeline_write", "false"),
    flag("fast_init", "false"),
    {.name = "ratio",
     .kind = kFloat,
     .default_json = "1.0",
     .min = 0,
     .max = 1},
    flag("super_offload", "false", kUnimpl),
    flag("convert_grad_on_cpu", "true", kNone),
    {.name = "cpuadam_cores_perc",
     .kind = kFloat,
     .default_json = "0.8",
     .support = kNone,
     .min = 0,
     .max = 1},
};
constexpr BlockSpec kOffloadOptimizer{"zero_optimization.offload_optimizer", kOffloadOptimizerKeys,
                                      UnknownKeys::kError};

constexpr KeySpec stage3(std::string_view name, std::string_view alias, std::string_view def,
                         Support s = kImpl) {
  return {.name = name,
          .kind = kInt,
          .default_json = def,
          .support = s,
          .min = 0,
          .alias = alias,
          .min_stage = 3};
}

constexpr KeySpec kZeroKeys[] = {
    {.name = "stage", .kind = kInt, .default_json = "0", .min = 0, .max = 3},
    flag("contiguous_gradients", "true"),
    flag("reduce_scatter", "true"),
    count("reduce_bucket_size", "500000000"),
    flag("use_multi_rank_bucket_allreduce", "true", kNone),
    flag("allgather_partitions", "true", kNone),
    count("allgather_bucket_size", "500000000"),
    {.name = "overlap_comm",
     .kind = kBool,
     .default_json = "null",
     .nullable = true,
     .note = "defaults to true at stage 3, false below"},
    flag("load_from_fp32_weights", "true"),
    flag("elastic_checkpoint", "false", kNone),
    {.name = "parameter_alignment",
     .kind = kBool,
     .default_json = "false",
     .support = kNone,
     .note = "DeepSpeed >= 0.18 pads each parameter in its ZeRO-1/2 flat buffers: a memory layout "
             "(ZeRO.cpp lays out its own; zero ckpt import reads DeepSpeed's)"},
    {.name = "offload_param",
     .kind = kBlock,
     .default_json = "{}",
     .nullable = true,
     .block = &kOffloadParam},
    {.name = "offload_optimizer",
     .kind = kBlock,
     .default_json = "{}",
     .nullable = true,
     .block = &kOffloadOptimizer},
    open_map("zenflow"),
    {.name = "sub_group_size",
     .kind = kInt,
     .default_json = "1000000000",
     .min = 0,
     .min_stage = 3},
    {.name = "cpu_offload_param",
     .kind = kBool,
     .default_json = "",
     .nullable = true,
     .deprecated_by = "offload_param"},
    {.name = "cpu_offload_use_pin_memory",
     .kind = kBool,
     .default_json = "",
     .nullable = true,
     .deprecated_by = "-",
     .note = "set pin_memory in offload_param / offload_optimizer instead"},
    {.name = "cpu_offload",
     .kind = kBool,
     .default_json = "",
     .nullable = true,
     .deprecated_by = "offload_optimizer"},
    stage3("stage3_prefetch_bucket_size", "prefetch_bucket_size", "50000000"),
    stage3("stage3_param_persistence_threshold", "param_persistence_threshold", "100000"),
    stage3("stage3_model_persistence_threshold", "model_persistence_threshold",
           "9223372036854775807"),
    stage3("stage3_max_live_parameters", "max_live_parameters", "1000000000"),
    stage3("stage3_max_reuse_distance", "max_reuse_distance", "1000000000"),
    {.name = "stage3_gather_16bit_weights_on_model_save",
     .kind = kBool,
     .default_json = "false",
     .alias = "gather_16bit_weights_on_model_save",
     .min_stage = 3},
    {.name = "stage3_module_granularity_threshold",
     .kind = kInt,
     .default_json = "0",
     .support = kUnimpl,
     .min = kNegInf,
     .alias = "module_granularity_threshold",
     .min_stage = 3},
    {.name = "stage3_use_all_reduce_for_fetch_params",
     .kind = kBool,
     .default_json = "false",
     .support = kUnimpl,
     .alias = "use_all_reduce_for_fetch_params",
     .min_stage = 3},
    {.name = "stage3_allgather_sequential",
     .kind = kBool,
     .default_json = "false",
     .support = kUnimpl,
     .alias = "allgather_sequential",
     .min_stage = 3},
    stage3("stage3_partition_stream_chunk_size", "partition_stream_chunk_size", "0", kNone),
    {.name = "stage3_gather_fp16_weights_on_model_save",
     .kind = kBool,
     .default_json = "",
     .deprecated_by = "stage3_gather_16bit_weights_on_model_save"},
    flag("ignore_unused_parameters", "true", kNone),
    {.name = "legacy_stage1",
     .kind = kBool,
     .default_json = "false",
     .note = "removed in DeepSpeed 0.5.9; true is rejected"},
    flag("round_robin_gradients", "false", kUnimpl),
    count("zero_hpz_partition_size", "1", 0, kUnimpl),
    flag("zero_quantized_weights", "false", kUnimpl),
    flag("zero_quantized_nontrainable_weights", "false", kUnimpl),
    flag("zero_quantized_gradients", "false", kUnimpl),
    open_map("zeropp_loco_param"),
    count("mics_shard_size", "-1", kNegInf, kUnimpl),
    flag("mics_hierarchical_params_gather", "false", kUnimpl),
    flag("memory_efficient_linear", "true", kNone),
    flag("pipeline_loading_checkpoint", "false", kNone),
    flag("override_module_apply", "true", kNone),
    flag("log_trace_cache_warnings", "false", kNone),
    flag("enable_sanity_checks", "false", kNone),
    flag("save_muon_momentum_buffer_in_memory", "false", kNone),
    open_map("leaf_module"),
};
constexpr BlockSpec kZero{"zero_optimization", kZeroKeys, UnknownKeys::kError};

// ---- precision
// -----------------------------------------------------------------------------------

constexpr KeySpec kFp16Keys[] = {
    flag("enabled", "false"),
    flag("auto_cast", "false", kUnimpl),
    real("loss_scale", "0"),
    count("initial_scale_power", "16"),
    count("loss_scale_window", "1000"),
    count("hysteresis", "2"),
    flag("consecutive_hysteresis", "false"),
    real("min_loss_scale", "1"),
    flag("fused_mode", "true", kNone),
    flag("fp16_master_weights_and_grads", "false", kUnimpl),
};
constexpr BlockSpec kFp16{"fp16", kFp16Keys};

constexpr KeySpec kBf16Keys[] = {
    flag("enabled", "false"),
    flag("immediate_grad_update", "true", kNone),
    // bf16 master weights / moments in the optimizer state (config/zero_rules.cc: DeepSpeed's
    // restrictions; docs/offload.md).
    flag("bf16_master_weights_and_grads", "false"),
    flag("bf16_optimizer_states", "false"),
};
constexpr BlockSpec kBf16{"bf16", kBf16Keys};

constexpr KeySpec kAmpKeys[] = {flag("enabled", "false", kUnimpl)};
// Everything but `enabled` is passed to apex's amp.initialize as keyword arguments.
constexpr BlockSpec kAmp{"amp", kAmpKeys, UnknownKeys::kAllow};

constexpr KeySpec kTorchAutocastKeys[] = {
    flag("enabled", "false", kUnimpl),
    text("dtype", "null", kUnimpl),
    {.name = "lower_precision_safe_modules",
     .kind = kList,
     .default_json = "null",
     .support = kUnimpl,
     .nullable = true},
};
constexpr BlockSpec kTorchAutocast{"torch_autocast", kTorchAutocastKeys};

constexpr KeySpec kDataTypesKeys[] = {
    {.name = "grad_accum_dtype",
     .kind = kEnum,
     .default_json = "null",
     .nullable = true,
     .choices = "fp32|fp16|bf16"},
};
constexpr BlockSpec kDataTypes{"data_types", kDataTypesKeys};

// ---- checkpoint, aio, activation checkpointing -------------------------------------------------

constexpr KeySpec kParallelWriteKeys[] = {flag("pipeline_stage", "false", kNone)};
constexpr BlockSpec kParallelWrite{"checkpoint.parallel_write", kParallelWriteKeys};

constexpr KeySpec kCheckpointKeys[] = {
    {.name = "tag_validation",
     .kind = kEnum,
     .default_json = "\"Warn\"",
     .choices = "Ignore|Warn|Fail",
     .case_insensitive = true},
    flag("load_universal", "false"),  // accepted: universal checkpoints are detected (docs/formats/deepspeed.md)
    flag("use_node_local_storage", "false"),
    block("parallel_write", &kParallelWrite, kNone),
};
constexpr BlockSpec kCheckpoint{"checkpoint", kCheckpointKeys};

constexpr KeySpec kAioKeys[] = {
    count("block_size", "1048576"),
    count("queue_depth", "8"),
    count("intra_op_parallelism", "1", 1),
    {.name = "thread_count",
     .kind = kInt,
     .default_json = "",
     .min = 1,
     .deprecated_by = "intra_op_parallelism"},
    flag("single_submit", "false"),
    flag("overlap_events", "true"),
    flag("use_gds", "false", kUnimpl),
};
constexpr BlockSpec kAio{"aio", kAioKeys};

constexpr KeySpec kActivationCheckpointingKeys[] = {
    flag("partition_activations", "false", kNone),  // warned about in validate_rules.cc
    flag("contiguous_memory_optimization", "false", kNone),
    flag("cpu_checkpointing", "false"),
    {.name = "number_checkpoints",
     .kind = kInt,
     .default_json = "null",
     .support = kNone,
     .nullable = true,
     .min = 0},
    flag("synchronize_checkpoint_boundary", "false", kNone),
    flag("profile", "false", kUnimpl),
};
constexpr BlockSpec kActivationCheckpointing{"activation_checkpointing",
                                             kActivationCheckpointingKeys};

// ---- monitors and profilers (DeepSpeed validates the monitor blocks with pydantic)
// ---------------

constexpr KeySpec kTensorboardKeys[] = {
    flag("enabled", "false"),
    text("output_path", "\"\""),
    text("job_name", "\"DeepSpeedJobName\""),
};
constexpr BlockSpec kTensorboard{"tensorboard", kTensorboardKeys, UnknownKeys::kError};

constexpr KeySpec kCsvMonitorKeys[] = {
    flag("enabled", "false"),
    text("output_path", "\"\""),
    text("job_name", "\"DeepSpeedJobName\""),
};
constexpr BlockSpec kCsvMonitor{"csv_monitor", kCsvMonitorKeys, UnknownKeys::kError};

// W&B and Comet need their Python clients: a clear pointer to the monitors ZeRO.cpp writes.
constexpr std::string_view kUseTensorboardOrCsv =
    "not supported: use tensorboard or csv_monitor, which ZeRO.cpp writes";

constexpr KeySpec kWandbKeys[] = {
    {.name = "enabled",
     .kind = Kind::kBool,
     .default_json = "false",
     .support = kUnimpl,
     .note = kUseTensorboardOrCsv},
    text("group", "null"),
    text("team", "null"),
    text("project", "\"deepspeed\""),
};
constexpr BlockSpec kWandb{"wandb", kWandbKeys, UnknownKeys::kError};

constexpr KeySpec kCometKeys[] = {
    {.name = "enabled",
     .kind = Kind::kBool,
     .default_json = "false",
     .support = kUnimpl,
     .note = kUseTensorboardOrCsv},
    count("samples_log_interval", "100"),
    text("project", "null"),
    text("workspace", "null"),
    text("api_key", "null"),
    text("experiment_name", "null"),
    text("experiment_key", "null"),
    {.name = "online", .kind = kBool, .default_json = "null", .nullable = true},
    text("mode", "null"),
};
constexpr BlockSpec kComet{"comet", kCometKeys, UnknownKeys::kError};

constexpr KeySpec kCommsLoggerKeys[] = {
    flag("enabled", "false", kUnimpl),
    flag("verbose", "false"),
    flag("prof_all", "true"),
    flag("debug", "false"),
    {.name = "prof_ops", .kind = kList, .default_json = "[]"},
};
constexpr BlockSpec kCommsLogger{"comms_logger", kCommsLoggerKeys, UnknownKeys::kError};

constexpr KeySpec kThroughputKeys[] = {flag("enabled", "true"), flag("synchronized", "true")};
constexpr BlockSpec kThroughput{"timers.throughput", kThroughputKeys, UnknownKeys::kError};
constexpr KeySpec kTimersKeys[] = {block("throughput", &kThroughput, kNone)};
constexpr BlockSpec kTimers{"timers", kTimersKeys};

constexpr KeySpec kFlopsProfilerKeys[] = {
    flag("enabled", "false", kUnimpl),
    real("recompute_fwd_factor", "0.0"),
    count("profile_step", "1"),
    count("module_depth", "-1", kNegInf),
    count("top_modules", "1"),
    flag("detailed", "true"),
    text("output_file", "null"),
};
constexpr BlockSpec kFlopsProfiler{"flops_profiler", kFlopsProfilerKeys};

// ---- features outside ZeRO
// -----------------------------------------------------------------------

constexpr KeySpec kElasticityKeys[] = {
    flag("enabled", "false", kUnimpl),
    count("max_train_batch_size", "2000"),
    {.name = "micro_batch_sizes", .kind = kNumList, .default_json = "[2, 4, 6]"},
    count("min_gpus", "1"),
    count("max_gpus", "10000"),
    count("min_time", "0"),
    real("version", "0.2"),
    flag("ignore_non_elastic_batch_info", "false"),
    flag("prefer_larger_batch", "true"),
    count("num_gpus_per_node", "1"),
    count("model_parallel_size", "1"),
};
constexpr BlockSpec kElasticity{"elasticity", kElasticityKeys};

constexpr KeySpec kAutotuningKeys[] = {
    flag("enabled", "false", kUnimpl),
    flag("fast", "true"),
    text("results_dir", "\"autotuning_results\""),
    text("exps_dir", "\"autotuning_exps\""),
    flag("overwrite", "true"),
    {.name = "start_profile_step",
     .kind = kInt,
     .default_json = "3",
     .min = 0,
     .alias = "start_step"},
    {.name = "end_profile_step", .kind = kInt, .default_json = "5", .min = 0, .alias = "end_step"},
    text("metric_path", "null"),
    {.name = "metric",
     .kind = kEnum,
     .default_json = "\"throughput\"",
     .choices = "latency|throughput|flops"},
    open_map("model_info", kNone),
    text("model_info_path", "null"),
    {.name = "tuner_type",
     .kind = kEnum,
     .default_json = "\"gridsearch\"",
     .choices = "gridsearch|random|model_based"},
    count("tuner_early_stopping", "5"),
    count("tuner_num_trials", "50"),
    open_map("arg_mappings", kNone),
    {.name = "max_train_batch_size",
     .kind = kInt,
     .default_json = "null",
     .nullable = true,
     .min = 0},
    count("min_train_batch_size", "1"),
    count("max_train_micro_batch_size_per_gpu", "1024"),
    count("min_train_micro_batch_size_per_gpu", "1"),
    count("num_tuning_micro_batch_sizes", "3"),
    count("mp_size", "1"),
};
constexpr BlockSpec kAutotuning{"autotuning", kAutotuningKeys};

constexpr KeySpec kPldKeys[] = {
    flag("enabled", "false", kUnimpl),
    real("theta", "1.0"),
    real("gamma", "0.001"),
};
constexpr BlockSpec kPld{"progressive_layer_drop", kPldKeys};

constexpr KeySpec kEigenvalueKeys[] = {
    flag("enabled", "false", kUnimpl),
    flag("verbose", "false"),
    count("max_iter", "100"),
    real("tol", "0.01"),
    real("stability", "1e-06"),
    count("gas_boundary_resolution", "1"),
    text("layer_name", "\"bert.encoder.layer\""),
    count("layer_num", "0"),
};
constexpr BlockSpec kEigenvalue{"eigenvalue", kEigenvalueKeys};

constexpr KeySpec kHybridEngineKeys[] = {
    flag("enabled", "false", kUnimpl),
    count("max_out_tokens", "512"),
    count("inference_tp_size", "1"),
    flag("release_inference_cache", "false"),
    flag("pin_parameters", "true"),
    count("tp_gather_partition_size", "8"),
};
constexpr BlockSpec kHybridEngine{"hybrid_engine", kHybridEngineKeys, UnknownKeys::kError};

constexpr KeySpec kNebulaKeys[] = {
    flag("enabled", "false", kUnimpl),
    text("persistent_storage_path", "null"),
    count("persistent_time_interval", "100"),
    count("num_of_version_in_retention", "2"),
    flag("enable_nebula_load", "true"),
    text("load_path", "null"),
};
constexpr BlockSpec kNebula{"nebula", kNebulaKeys};

// ---- optimizer and scheduler
// ---------------------------------------------------------------------

constexpr KeySpec kOptimizerKeys[] = {
    {.name = "type", .kind = kString, .default_json = "null", .nullable = true},
    open_map("params", kImpl),  // checked per type (optimizer_types())
    flag("legacy_fusion", "false", kNone),
};
constexpr BlockSpec kOptimizer{"optimizer", kOptimizerKeys};

constexpr KeySpec kSchedulerKeys[] = {
    {.name = "type", .kind = kString, .default_json = "null", .nullable = true},
    open_map("params", kImpl),
};
constexpr BlockSpec kScheduler{"scheduler", kSchedulerKeys};

// ---- top level
// -----------------------------------------------------------------------------------

constexpr KeySpec batch(std::string_view name) {
  return {.name = name,
          .kind = kInt,
          .default_json = "null",
          .nullable = true,
          .min = 0,
          .min_exclusive = true};
}

constexpr KeySpec kRootKeys[] = {
    batch("train_batch_size"),
    batch("train_micro_batch_size_per_gpu"),
    batch("gradient_accumulation_steps"),
    {.name = "steps_per_print", .kind = kInt, .default_json = "null", .nullable = true, .min = 0},
    real("gradient_clipping", "0.0"),
    flag("wall_clock_breakdown", "false"),
    block("optimizer", &kOptimizer),
    block("scheduler", &kScheduler),
    {.name = "communication_data_type",
     .kind = kEnum,
     .default_json = "null",
     .nullable = true,
     .choices = "fp32|fp16|bf16"},
    block("fp16", &kFp16),
    block("bf16", &kBf16),
    {.name = "bfloat16",
     .kind = kBlock,
     .default_json = "",
     .deprecated_by = "bf16",
     .block = &kBf16},
    block("data_types", &kDataTypes),
    block("zero_optimization", &kZero),
    flag("zero_allow_untested_optimizer", "false"),
    flag("zero_force_ds_cpu_optimizer", "true", kNone),
    block("aio", &kAio),
    block("checkpoint", &kCheckpoint),
    block("activation_checkpointing", &kActivationCheckpointing),
    block("csv_monitor", &kCsvMonitor),
    block("tensorboard", &kTensorboard),
    block("wandb", &kWandb),
    block("comet", &kComet),
    block("comms_logger", &kCommsLogger),
    block("flops_profiler", &kFlopsProfiler),
    block("timers", &kTimers, kNone),
    block("amp", &kAmp),
    block("torch_autocast", &kTorchAutocast),
    {.name = "prescale_gradients", .kind = kBool, .default_json = "false", .support = kUnimpl},
    real("gradient_predivide_factor", "1.0", 0, kUnimpl),
    {.name = "seq_parallel_comm_data_type",
     .kind = kEnum,
     .default_json = "\"fp32\"",
     .support = kNone,
     .choices = "fp32|fp16|bf16",
     .alias = "seq_parallel_communication_data_type"},
    flag("sparse_gradients", "false", kUnimpl),
    flag("memory_breakdown", "false", kUnimpl),
    flag("dump_state", "false", kUnimpl),
    flag("disable_allgather", "false", kNone),
    flag("dataloader_drop_last", "false", kNone),
    flag("graph_harvesting", "false", kUnimpl),
    flag("use_data_before_expert_parallelism", "false", kNone),
    {.name = "vocabulary_size",
     .kind = kInt,
     .default_json = "null",
     .support = kNone,
     .nullable = true,
     .min = 0},
    {.name = "allgather_size",
     .kind = kInt,
     .default_json = "",
     .support = kNone,
     .min = 0,
     .note = "only read with the legacy \"zero_optimization\": true form"},
    block("elasticity", &kElasticity),
    block("autotuning", &kAutotuning),
    block("progressive_layer_drop", &kPld),
    block("eigenvalue", &kEigenvalue),
    block("hybrid_engine", &kHybridEngine),
    block("nebula", &kNebula),
    open_map("sparse_attention"),
    open_map("compression_training"),
    open_map("curriculum_learning"),
    open_map("data_efficiency"),
    open_map("pipeline"),
    open_map("tensor_parallel"),
    open_map("weight_quantization"),
    open_map("quantize_training"),
    open_map("compile"),
};
constexpr BlockSpec kRoot{"", kRootKeys};
// clang-format on

bool iequals(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  });
}

}  // namespace

const BlockSpec& root_schema() { return kRoot; }

const KeySpec* find_key(const BlockSpec& block, std::string_view key) {
  for (const KeySpec& k : block.keys) {
    if (k.name == key || (!k.alias.empty() && k.alias == key)) return &k;
  }
  return nullptr;
}

const TypeSpec* find_type(std::span<const TypeSpec> types, std::string_view name) {
  for (const TypeSpec& t : types) {
    if (t.name == name || (t.case_insensitive && iequals(t.name, name))) return &t;
  }
  return nullptr;
}

}  // namespace zero::config
