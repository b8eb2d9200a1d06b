// The run plan (run_plan.h), moved out of trainer.cc unchanged in behaviour.
#include "runtime/run_plan.h"

#include <algorithm>

#include <map>
#include <optional>

#include <fmt/format.h>

#include "config/loader.h"
#include "config/validate.h"
#include "core/device.h"
#include "optim/loss_scaler.h"
#include "runtime/train_steps.h"

namespace zero::runtime {

using config::Json;

namespace {

// Optimizer / scheduler params written in the file or set by a flag (DeepSpeed passes exactly
// those to the constructor; defaults the effective config added are not part of the call).
Json given_params(const config::EffectiveConfig& eff, const std::string& block) {
  Json out = Json::object();
  const Json& params = eff.json[block]["params"];
  for (auto it = params.begin(); it != params.end(); ++it) {
    if (eff.origin(block + ".params." + it.key()) != config::Origin::kDefault) {
      out[it.key()] = it.value();
    }
  }
  return out;
}

}  // namespace

sharding::ZeroOptions zero_options_from_ds(const config::DsConfig& ds,
                                           const config::EffectiveConfig& eff, DType model_dtype) {
  sharding::ZeroOptions zo;
  const config::ZeroConfig& z = ds.zero;
  zo.stage = static_cast<int>(z.stage.value);
  zo.overlap_comm = z.overlap_comm.value;
  zo.reduce_scatter = z.reduce_scatter.value;
  const Json& zjson = eff.json["zero_optimization"];
  if (zjson.contains("allgather_partitions") && zjson["allgather_partitions"].is_boolean()) {
    zo.allgather_partitions = zjson["allgather_partitions"].get<bool>();
  }
  zo.reduce_bucket_numel = z.reduce_bucket_size.value;
  zo.prefetch_bucket_numel = z.prefetch_bucket_size.value;
  zo.max_live_numel = z.max_live_parameters.value;
  zo.max_reuse_distance_numel = z.max_reuse_distance.value;
  zo.param_persistence_threshold_numel = z.param_persistence_threshold.value;
  zo.model_persistence_threshold_numel = z.model_persistence_threshold.value;
  // DeepSpeed: unset means the model dtype (gradients travel in bf16 / fp16 under mixed precision).
  zo.comm_dtype = ds.communication_data_type.value.value_or(model_dtype);
  return zo;
}

OffloadOptions offload_options_from_ds(const config::DsConfig& ds) {
  const config::ZeroConfig& z = ds.zero;
  OffloadOptions off;
  // Known settings this build does not act on: say so once, never drop them silently.
  // Optimizer offload: CPU Adam, and at stage 3 with "nvme" the state in swap files (the engine
  // refuses stage 0 and treats nvme as cpu below stage 3, with a warning, like DeepSpeed).
  const config::OffloadConfig& oo = z.offload_optimizer;
  off.optimizer = oo.device.value == config::OffloadDevice::kCpu    ? OptimizerOffload::kCpu
                  : oo.device.value == config::OffloadDevice::kNvme ? OptimizerOffload::kNvme
                                                                    : OptimizerOffload::kNone;
  off.nvme_path = oo.nvme_path.value.value_or("");
  off.pipeline_read = oo.pipeline_read.value;
  off.pipeline_write = oo.pipeline_write.value;
  off.aio.block_size_bytes = static_cast<uint64_t>(ds.aio.block_size.value);
  off.aio.queue_depth = static_cast<int>(ds.aio.queue_depth.value);
  off.aio.intra_op_parallelism = static_cast<int>(ds.aio.intra_op_parallelism.value);
  off.aio.single_submit = ds.aio.single_submit.value;
  off.aio.overlap_events = ds.aio.overlap_events.value;
  off.aio.use_gds = ds.aio.use_gds.value;
  off.fast_init = oo.fast_init.value;
  off.pin_memory = oo.pin_memory.value;
  off.ratio = oo.ratio.value;
  // Parameter offload (stage 3): shards in host memory, or on NVMe beyond max_in_cpu.
  const config::OffloadConfig& op = z.offload_param;
  sharding::ParamOffloadOptions& po = off.param;
  po.device = op.device.value == config::OffloadDevice::kCpu    ? sharding::ParamOffload::kCpu
              : op.device.value == config::OffloadDevice::kNvme ? sharding::ParamOffload::kNvme
                                                                : sharding::ParamOffload::kNone;
  po.nvme_path = op.nvme_path.value.value_or("");
  po.max_in_cpu_numel = op.max_in_cpu.value;
  po.buffer_count = static_cast<int>(op.buffer_count.value);
  po.buffer_numel = op.buffer_size.value;
  po.pin_memory = op.pin_memory.value;
  po.aio = off.aio;
  return off;
}

namespace {

constexpr const char* kWarmupPath = "scheduler.params.warmup_num_steps";
constexpr const char* kTotalPath = "scheduler.params.total_num_steps";

// The ds_config as written (validated; warnings into plan.notes), with what the HF Trainer adds
// when the config leaves the optimizer to it. `config_name` names it in errors.
StatusOr<Json> load_config_doc(const TrainArgs& args, Plan& plan, std::string& config_name) {
  Json doc = Json::object();
  config_name = "(no --deepspeed config)";
  if (!args.deepspeed.empty()) {
    ZERO_ASSIGN_OR_RETURN(config::LoadedConfig loaded, config::load_ds_config_file(args.deepspeed));
    config_name = args.deepspeed;
    config::ValidationReport report = config::validate_ds_config(loaded.json, {}, &loaded.sources);
    for (const auto& d : report.diagnostics) {
      if (d.severity == config::Severity::kWarning)
        plan.notes.push_back(config::format_diagnostic(d));
    }
    if (!report.ok()) {
      std::string all;
      for (const auto& d : report.diagnostics) {
        if (d.severity == config::Severity::kError) all += config::format_diagnostic(d) + "\n";
      }
      return invalid_argument("{}: invalid DeepSpeed config:\n{}", config_name, all);
    }
    doc = std::move(loaded.json);
  }
  if (!doc.contains("optimizer")) {
    doc["optimizer"] = {
        {"type", "AdamW"},
        {"params", {{"lr", "auto"}, {"betas", "auto"}, {"eps", "auto"}, {"weight_decay", "auto"}}}};
  }
  return doc;
}

// The scheduler block's type and which of its params a flag fills.
struct SchedulerShape {
  std::string type;  // empty: no scheduler block
  bool has_max_lr = false;
  bool has_total = false;
};

SchedulerShape scheduler_shape(const config::EffectiveConfig& eff) {
  SchedulerShape s;
  const Json& type = eff.json["scheduler"]["type"];
  if (type.is_string()) s.type = type.get<std::string>();
  s.has_max_lr = s.type == "WarmupLR" || s.type == "WarmupDecayLR";
  s.has_total = s.type == "WarmupDecayLR" || s.type == "WarmupCosineLR";
  return s;
}

// Flags given on the command line fill "auto" (or absent) values; contradictions are errors.
Status apply_flags(config::EffectiveConfig& eff, const TrainArgs& args,
                   const SchedulerShape& sched) {
  auto flag = [&](const std::string& path, const Json& value, const char* name) -> Status {
    return config::resolve_from_flag(eff, path, value, name);
  };
  if (args.per_device_train_batch_size) {
    ZERO_RETURN_IF_ERROR(flag("train_micro_batch_size_per_gpu", *args.per_device_train_batch_size,
                              "--per_device_train_batch_size"));
  }
  if (args.gradient_accumulation_steps) {
    ZERO_RETURN_IF_ERROR(flag("gradient_accumulation_steps", *args.gradient_accumulation_steps,
                              "--gradient_accumulation_steps"));
  }
  if (args.learning_rate) {
    ZERO_RETURN_IF_ERROR(flag("optimizer.params.lr", *args.learning_rate, "--learning_rate"));
    if (sched.has_max_lr) {
      ZERO_RETURN_IF_ERROR(
          flag("scheduler.params.warmup_max_lr", *args.learning_rate, "--learning_rate"));
    }
  }
  if (args.weight_decay) {
    ZERO_RETURN_IF_ERROR(
        flag("optimizer.params.weight_decay", *args.weight_decay, "--weight_decay"));
  }
  if (args.adam_beta1 || args.adam_beta2) {
    const Json& cur = eff.json["optimizer"]["params"]["betas"];
    const bool explicit_betas = cur.is_array() && cur.size() == 2;
    double b1 = args.adam_beta1.value_or(explicit_betas ? cur[0].get<double>() : 0.9);
    double b2 = args.adam_beta2.value_or(explicit_betas ? cur[1].get<double>() : 0.999);
    ZERO_RETURN_IF_ERROR(flag("optimizer.params.betas", Json::array({b1, b2}),
                              args.adam_beta1 ? "--adam_beta1" : "--adam_beta2"));
  }
  if (args.adam_epsilon) {
    ZERO_RETURN_IF_ERROR(flag("optimizer.params.eps", *args.adam_epsilon, "--adam_epsilon"));
  }
  if (args.max_grad_norm) {
    ZERO_RETURN_IF_ERROR(flag("gradient_clipping", *args.max_grad_norm, "--max_grad_norm"));
  }
  if (args.bf16) ZERO_RETURN_IF_ERROR(flag("bf16.enabled", *args.bf16, "--bf16"));
  if (args.fp16) ZERO_RETURN_IF_ERROR(flag("fp16.enabled", *args.fp16, "--fp16"));
  return ok_status();
}

// "auto" values no flag resolved take the TrainingArguments defaults (what HF would pass), or the
// model-derived values HF computes for the ZeRO buckets.
Status apply_auto_defaults(config::EffectiveConfig& eff, const model::ModelConfig& model) {
  const double hidden = static_cast<double>(model.hidden_size);
  const double lr_now = eff.json["optimizer"]["params"]["lr"].is_number()
                            ? eff.json["optimizer"]["params"]["lr"].get<double>()
                            : 5e-5;
  const std::map<std::string, Json> defaults = {
      {"train_micro_batch_size_per_gpu", 8},
      {"gradient_accumulation_steps", 1},
      {"optimizer.params.lr", 5e-5},
      {"optimizer.params.betas", Json::array({0.9, 0.999})},
      {"optimizer.params.eps", 1e-8},
      {"optimizer.params.weight_decay", 0.0},
      {"gradient_clipping", 1.0},
      {"scheduler.params.warmup_max_lr", lr_now},
      {"scheduler.params.warmup_min_lr", 0},
      {"bf16.enabled", false},
      {"fp16.enabled", false},
      {"zero_optimization.reduce_bucket_size", static_cast<int64_t>(hidden * hidden)},
      {"zero_optimization.stage3_prefetch_bucket_size",
       static_cast<int64_t>(0.9 * hidden * hidden)},
      {"zero_optimization.stage3_param_persistence_threshold", static_cast<int64_t>(10 * hidden)},
  };
  for (const std::string& path : config::unresolved_auto_paths(eff)) {
    // Derived later from the triad (the batch, and the steps an epoch takes).
    if (path == "train_batch_size" || path == kWarmupPath || path == kTotalPath) continue;
    auto it = defaults.find(path);
    if (it == defaults.end()) {
      return invalid_argument("{}: \"auto\" has no flag or default to resolve it (write a value)",
                              path);
    }
    ZERO_RETURN_IF_ERROR(config::resolve_from_flag(eff, path, it->second, "(default)"));
  }
  return ok_status();
}

// Batch triad with the real world size (DeepSpeed's derivation and messages).
Status derive_batch(const config::EffectiveConfig& eff, int world, Plan& plan) {
  config::BatchTriad given;
  auto get_int = [&](const char* key) -> std::optional<int64_t> {
    const Json& v = eff.json[key];
    if (v.is_number_integer()) return v.get<int64_t>();
    return std::nullopt;
  };
  given.train_batch_size = get_int("train_batch_size");
  given.micro_batch_per_gpu = get_int("train_micro_batch_size_per_gpu");
  given.gradient_accumulation_steps = get_int("gradient_accumulation_steps");
  if (!given.train_batch_size && !given.micro_batch_per_gpu) {
    given.micro_batch_per_gpu = 8;  // TrainingArguments' per_device_train_batch_size default
  }
  std::string triad_path;
  auto triad = config::derive_batch_triad(given, world, &triad_path);
  if (!triad.ok()) return invalid_argument("{}: {}", triad_path, triad.status().message());
  plan.micro_batch = *triad->micro_batch_per_gpu;
  plan.grad_accum = *triad->gradient_accumulation_steps;
  plan.train_batch = *triad->train_batch_size;
  return ok_status();
}

// Steps: --max_steps, or the epochs counted as the HF Trainer counts them; then the warmup
// (--warmup_steps, or --warmup_ratio of the steps), into the scheduler block's "auto" values.
// Returns the warmup steps a flag gave.
StatusOr<std::optional<int64_t>> resolve_steps(const TrainArgs& args, config::EffectiveConfig& eff,
                                               const SchedulerShape& sched, int world,
                                               int64_t num_samples, Plan& plan) {
  auto flag = [&](const std::string& path, const Json& value, const char* name) -> Status {
    return config::resolve_from_flag(eff, path, value, name);
  };
  const EpochGeometry geometry{num_samples, plan.micro_batch, plan.grad_accum, world};
  ZERO_ASSIGN_OR_RETURN(plan.max_steps,
                        resolve_max_steps(args.max_steps, args.num_train_epochs, geometry));
  const char* steps_flag = args.max_steps > 0 ? "--max_steps" : "--num_train_epochs";
  if (args.max_steps <= 0) {
    plan.info.push_back(fmt::format("{} steps for --num_train_epochs {} (as the HF Trainer counts)",
                                    plan.max_steps, *args.num_train_epochs));
  }
  std::string warmup_note;
  ZERO_ASSIGN_OR_RETURN(
      std::optional<int64_t> warmup,
      resolve_warmup_steps(args.warmup_steps, args.warmup_ratio, plan.max_steps, &warmup_note));
  if (!warmup_note.empty()) plan.notes.push_back(warmup_note);
  const bool warmup_from_ratio =
      args.warmup_ratio && !(args.warmup_steps && *args.warmup_steps > 0);
  const char* warmup_flag = warmup_from_ratio ? "--warmup_ratio" : "--warmup_steps";
  if (warmup && !sched.type.empty()) ZERO_RETURN_IF_ERROR(flag(kWarmupPath, *warmup, warmup_flag));
  if (sched.has_total) ZERO_RETURN_IF_ERROR(flag(kTotalPath, plan.max_steps, steps_flag));
  for (const std::string& path : config::unresolved_auto_paths(eff)) {
    if (path == kWarmupPath) ZERO_RETURN_IF_ERROR(flag(path, 0, "(default)"));
    if (path == kTotalPath) ZERO_RETURN_IF_ERROR(flag(path, plan.max_steps, steps_flag));
  }
  return warmup;
}

// The learning-rate schedule: HF's get_scheduler formulas without a scheduler block (the HF
// Trainer builds its own and DeepSpeed steps it), DeepSpeed's with one, constant with neither.
StatusOr<optim::LrSchedule> make_schedule(const TrainArgs& args, const config::EffectiveConfig& eff,
                                          bool hf_schedule, const SchedulerShape& sched,
                                          std::optional<int64_t> warmup, double lr, Plan& plan) {
  if (hf_schedule) {
    const std::string type = args.lr_scheduler_type.value_or("linear");
    ZERO_ASSIGN_OR_RETURN(
        optim::LrSchedule schedule,
        optim::LrSchedule::from_hf_flags(type, args.lr_scheduler_kwargs.value_or(""),
                                         warmup.value_or(0), plan.max_steps, lr));
    if (type == "constant" && warmup.value_or(0) > 0) {
      plan.notes.push_back(
          "warning: --lr_scheduler_type constant has no warmup (as in HF); use "
          "constant_with_warmup");
    }
    plan.info.push_back(fmt::format(
        "lr schedule: HF {} from lr {:g}, {} warmup steps of {} (no scheduler block in the config)",
        type, lr, warmup.value_or(0), plan.max_steps));
    return schedule;
  }
  if (sched.type.empty()) return optim::LrSchedule::constant(lr);
  return optim::LrSchedule::from_json(sched.type, given_params(eff, "scheduler"), lr);
}

// The engine's options from the resolved config (`doc` is the config as written: fp16's loss
// scaler defaults depend on which keys were written).
Status make_engine_options(const TrainArgs& args, const model::ModelConfig& model, const Json& doc,
                           const config::EffectiveConfig& eff, bool hf_schedule,
                           const SchedulerShape& sched, std::optional<int64_t> warmup, int world,
                           Plan& plan) {
  const config::DsConfig& ds = plan.ds;
  EngineOptions& o = plan.engine;
  o.model_config = model;
  ZERO_ASSIGN_OR_RETURN(o.device, parse_device_flag(args.device));
  o.offload_overlap = args.offload_overlap;
  ZERO_ASSIGN_OR_RETURN(o.dist_backend, parse_dist_backend(args.dist_backend));
  o.transformer.activation_checkpointing = args.gradient_checkpointing;
  o.transformer.checkpoints_in_host_memory = ds.activation_checkpointing.cpu_checkpointing.value;
  if (o.transformer.checkpoints_in_host_memory && !o.transformer.activation_checkpointing) {
    plan.notes.push_back(
        "warning: activation_checkpointing.cpu_checkpointing: acts only on checkpointed "
        "activations; pass --gradient_checkpointing to checkpoint the blocks");
  }
  o.dtype = ds.bf16_enabled.value   ? DType::kBF16
            : ds.fp16.enabled.value ? DType::kF16
                                    : DType::kF32;
  // bf16 master weights / optimizer states (DeepSpeed 0.19): config::apply_zero_rules says where
  // they are allowed (sanitize_engine_options below).
  if (ds.bf16_master_weights_and_grads.value) o.state_dtypes.master = DType::kBF16;
  if (ds.bf16_optimizer_states.value) o.state_dtypes.moments = DType::kBF16;
  o.gradient_clipping = ds.gradient_clipping.value;
  const std::string opt_type = ds.optimizer.type.value.value_or("AdamW");
  ZERO_ASSIGN_OR_RETURN(o.optimizer,
                        optim::optimizer_spec_from_json(opt_type, given_params(eff, "optimizer")));
  ZERO_ASSIGN_OR_RETURN(o.schedule,
                        make_schedule(args, eff, hf_schedule, sched, warmup, o.optimizer.lr, plan));
  if (o.dtype == DType::kF16) {
    Json fp16 = doc.contains("fp16") ? doc["fp16"] : Json::object();
    fp16["enabled"] = true;
    ZERO_ASSIGN_OR_RETURN(o.loss_scaler, optim::loss_scaler_config_from_fp16_json(fp16));
  }
  o.zero = zero_options_from_ds(ds, eff, o.dtype);
  o.offload = offload_options_from_ds(ds);
  if (ds.grad_accum_dtype.value && *ds.grad_accum_dtype.value != DType::kF32) {
    plan.notes.push_back(
        "warning: data_types.grad_accum_dtype: gradients are accumulated in fp32 across "
        "micro-steps whatever the setting (16-bit accumulation is what makes bf16 runs diverge "
        "with gradient accumulation in DeepSpeed)");
  }
  // The stage / offload rules (config::apply_zero_rules, the validator's own), applied here so the
  // plan (and the banner) says what will run. A warning the validator already noted for the
  // config file is not repeated; one that comes from flags (no config, or values it left "auto")
  // is noted here, so no rule that changed the run goes unsaid.
  ZERO_ASSIGN_OR_RETURN(std::vector<std::string> warnings, sanitize_engine_options(o, world));
  for (const std::string& w : warnings) {
    const bool noted = std::any_of(plan.notes.begin(), plan.notes.end(), [&](const std::string& n) {
      return n.find(w) != std::string::npos;
    });
    if (!noted) plan.notes.push_back("warning: " + w);
  }
  return ok_status();
}

}  // namespace

StatusOr<Plan> make_plan(const TrainArgs& args, const model::ModelConfig& model, int world,
                         int64_t num_samples) {
  Plan plan;
  std::string config_name;
  ZERO_ASSIGN_OR_RETURN(Json doc, load_config_doc(args, plan, config_name));
  // Without a scheduler block the HF Trainer builds its own schedule (get_scheduler) and DeepSpeed
  // steps it: HF's formulas, built once the steps are known. A block keeps DeepSpeed's.
  const bool hf_schedule = !doc.contains("scheduler");
  if (!hf_schedule && args.lr_scheduler_type) {
    return invalid_argument("--lr_scheduler_type {} contradicts scheduler.type in {} (remove one)",
                            *args.lr_scheduler_type, config_name);
  }
  if (!hf_schedule && args.lr_scheduler_kwargs) {
    return invalid_argument(
        "--lr_scheduler_kwargs: {} has a scheduler block (set its params there, or remove the "
        "block to use --lr_scheduler_type)",
        config_name);
  }
  ZERO_ASSIGN_OR_RETURN(plan.effective, config::build_effective_config(doc));
  config::EffectiveConfig& eff = plan.effective;
  const SchedulerShape sched = scheduler_shape(eff);
  ZERO_RETURN_IF_ERROR(apply_flags(eff, args, sched));
  ZERO_RETURN_IF_ERROR(apply_auto_defaults(eff, model));
  ZERO_RETURN_IF_ERROR(derive_batch(eff, world, plan));
  ZERO_ASSIGN_OR_RETURN(std::optional<int64_t> warmup,
                        resolve_steps(args, eff, sched, world, num_samples, plan));
  ZERO_ASSIGN_OR_RETURN(plan.ds, config::make_ds_config(eff));
  ZERO_RETURN_IF_ERROR(
      make_engine_options(args, model, doc, eff, hf_schedule, sched, warmup, world, plan));
  return plan;
}

}  // namespace zero::runtime
