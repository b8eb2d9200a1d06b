// Cross-key rules of validate_ds_config: optimizer / scheduler types and parameters, the
// combinations DeepSpeed rejects, settings it silently ignores at the configured stage, and the
// batch-size triad.
#include <cmath>
#include <string_view>
#include <vector>

#include "config/did_you_mean.h"
#include "config/validate_internal.h"
#include "config/zero_rules.h"
#include "core/checked_math.h"

namespace zero::config {
namespace {

const Json* get(const Json* obj, std::string_view key, std::string_view alias = {}) {
  if (obj == nullptr || !obj->is_object()) return nullptr;
  if (auto it = obj->find(key); it != obj->end()) return &*it;
  if (!alias.empty()) {
    if (auto it = obj->find(alias); it != obj->end()) return &*it;
  }
  return nullptr;
}

bool is_auto(const Json* v) { return v != nullptr && v->is_string() && *v == "auto"; }
bool is_true(const Json* v) { return v != nullptr && v->is_boolean() && v->get<bool>(); }

std::optional<int64_t> as_int(const Json* v) {
  if (v == nullptr || !v->is_number()) return std::nullopt;
  if (v->is_number_integer()) return v->get<int64_t>();
  double d = v->get<double>();
  if (std::floor(d) != d || std::fabs(d) >= 9.2e18) return std::nullopt;
  return static_cast<int64_t>(d);
}

std::optional<double> as_double(const Json* v) {
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->get<double>();
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string device_of(const Json* offload) {
  const Json* d = get(offload, "device");
  return d != nullptr && d->is_string() ? lower(d->get<std::string>()) : "none";
}

// What the rules need to know about the document, read once.
struct Facts {
  const Json* zero = nullptr;        // zero_optimization object (nullptr when absent/bool)
  std::optional<int64_t> stage = 0;  // nullopt when "auto" or invalid
  std::string stage_text = "0";      // as written, for messages
  const Json* offload_param = nullptr;
  const Json* offload_optimizer = nullptr;
  std::string param_device = "none";  // deprecated cpu_offload_param / cpu_offload included
  std::string optim_device = "none";
};

Facts read_facts(Context& ctx, const Json& config) {
  Facts f;
  const Json* zero = get(&config, "zero_optimization");
  if (zero != nullptr && zero->is_boolean()) {
    bool on = zero->get<bool>();
    f.stage = on ? 1 : 0;
    f.stage_text = std::to_string(on ? 1 : 0);
    ctx.warning("zero_optimization",
                fmt::format("legacy boolean form, read as {{\"stage\": {}}}", on ? 1 : 0),
                on ? "write \"zero_optimization\": {\"stage\": 1}; allgather_size becomes "
                     "allgather_bucket_size"
                   : "write \"zero_optimization\": {\"stage\": 0}");
    return f;
  }
  if (zero == nullptr || !zero->is_object()) return f;
  f.zero = zero;
  if (const Json* st = get(zero, "stage")) {
    f.stage = as_int(st);
    if (f.stage && (*f.stage < 0 || *f.stage > 3)) f.stage = std::nullopt;
    f.stage_text = ctx.quote("zero_optimization.stage", *st);
  }
  f.offload_param = get(zero, "offload_param");
  f.offload_optimizer = get(zero, "offload_optimizer");
  f.param_device = device_of(f.offload_param);
  f.optim_device = device_of(f.offload_optimizer);
  if (f.offload_param == nullptr && is_true(get(zero, "cpu_offload_param"))) f.param_device = "cpu";
  if (f.offload_optimizer == nullptr && is_true(get(zero, "cpu_offload"))) f.optim_device = "cpu";
  return f;
}

void check_typed_block(Context& ctx, const Json& config, std::string_view block,
                       std::span<const TypeSpec> types) {
  const Json* obj = get(&config, block);
  if (obj == nullptr || !obj->is_object()) return;
  std::string type_path = path_join(block, "type");
  std::string params_path = path_join(block, "params");
  const Json* type = get(obj, "type");
  const Json* params = get(obj, "params");
  if (params != nullptr && !params->is_object() && !params->is_null() && !is_auto(params)) {
    ctx.error(params_path,
              fmt::format("expected an object, got {}", ctx.quote(params_path, *params)));
    params = nullptr;
  }
  if (const Json* mgn = get(params, "max_grad_norm"); mgn != nullptr && block == "optimizer") {
    ctx.error(path_join(params_path, "max_grad_norm"),
              "not accepted inside optimizer.params (DeepSpeed raises ValueError)",
              "use the top-level gradient_clipping");
  }
  if (type == nullptr || type->is_null()) {
    if (params != nullptr && params->is_object() && !params->empty()) {
      ctx.error(type_path, fmt::format("missing: required when {} is given", params_path));
    }
    return;
  }
  if (!type->is_string() || is_auto(type)) return;  // wrong type already reported by the walk
  const std::string& name = type->get_ref<const std::string&>();
  const TypeSpec* spec = find_type(types, name);
  if (spec == nullptr) {
    std::vector<std::string_view> names;
    std::string known;
    for (const TypeSpec& t : types) {
      names.push_back(t.name);
      if (t.params->unknown != UnknownKeys::kAllow || block == "optimizer") {
        if (t.support == Support::kImplemented)
          known += fmt::format("{}{}", known.empty() ? "" : ", ", t.name);
      }
    }
    auto near = did_you_mean(name, names);
    ctx.error(type_path, fmt::format("unknown {} type \"{}\"", block, name),
              near ? fmt::format("did you mean \"{}\"?", *near)
                   : fmt::format("ZeRO.cpp implements {}", known));
    return;
  }
  if (spec->support == Support::kUnimplemented) {
    ctx.warning(type_path, fmt::format("{} \"{}\" is known to DeepSpeed but not implemented by "
                                       "ZeRO.cpp; `zero train` will refuse it",
                                       block, name));
  }
  if (params != nullptr && params->is_object()) {
    Json without = *params;
    without.erase("max_grad_norm");  // reported above
    check_block(ctx, *spec->params, without, params_path);
  }
  for (const KeySpec& k : spec->params->keys) {
    if (k.required && get(params, k.name) == nullptr) {
      ctx.error(path_join(params_path, k.name),
                fmt::format("missing: required by {} \"{}\"", block, spec->name));
    }
  }
}

void check_precision(Context& ctx, const Json& config, const Facts& f) {
  const Json* fp16 = get(&config, "fp16");
  const Json* bf16 = get(&config, "bf16", "bfloat16");
  std::string bf16_block = get(&config, "bf16") ? "bf16" : "bfloat16";
  if (is_true(get(fp16, "enabled")) && is_true(get(bf16, "enabled"))) {
    ctx.error("fp16.enabled",
              fmt::format("fp16 and bf16 cannot both be enabled ({}.enabled is "
                          "also true)",
                          bf16_block),
              "enable one of them");
  }
  if (is_true(get(get(&config, "amp"), "enabled")) && f.stage.value_or(0) > 0) {
    ctx.error("amp.enabled",
              fmt::format("apex AMP and ZeRO are not compatible (zero_optimization.stage is {})",
                          f.stage_text),
              "use fp16 or bf16 instead of amp");
  }
  if (is_true(get(fp16, "fp16_master_weights_and_grads"))) {
    bool offload = f.optim_device != "none";
    if (f.stage && (*f.stage != 2 || !offload)) {
      ctx.error("fp16.fp16_master_weights_and_grads",
                fmt::format("needs ZeRO stage 2 with optimizer offload (zero_optimization.stage "
                            "is {}, zero_optimization.offload_optimizer.device is \"{}\")",
                            f.stage_text, f.optim_device));
    }
  }
}

void check_optimizer_with_zero(Context& ctx, const Json& config, const Facts& f) {
  const Json* type = get(get(&config, "optimizer"), "type");
  if (type == nullptr || !type->is_string() || is_auto(type)) return;
  const TypeSpec* spec = find_type(optimizer_types(), type->get<std::string>());
  if (spec == nullptr || f.stage.value_or(0) == 0) return;
  if (spec->zero_incompatible) {
    ctx.error("optimizer.type",
              fmt::format("1-bit optimizer \"{}\" cannot run with ZeRO (zero_optimization.stage "
                          "is {})",
                          type->get<std::string>(), f.stage_text),
              "use Adam/AdamW with ZeRO, or set zero_optimization.stage to 0");
  } else if (!spec->zero_supported && !is_true(get(&config, "zero_allow_untested_optimizer"))) {
    ctx.error("optimizer.type",
              fmt::format("\"{}\" is not a ZeRO-tested optimizer (zero_optimization.stage is {})",
                          type->get<std::string>(), f.stage_text),
              "set zero_allow_untested_optimizer to true to use it anyway");
  }
}

void check_zero(Context& ctx, const Json& config, const Facts& f, int world_size) {
  const Json* bf16 = get(&config, "bf16", "bfloat16");
  const bool bf16_master = is_true(get(bf16, "bf16_master_weights_and_grads"));
  const bool bf16_states = is_true(get(bf16, "bf16_optimizer_states"));
  // Without a zero_optimization block only the bf16 state keys have rules to check (stage 0).
  if (f.zero == nullptr && !bf16_master && !bf16_states) return;
  const bool below3 = f.stage && *f.stage < 3;
  // The stage / offload rules are apply_zero_rules' (what the engine applies too).
  auto target = [](const std::string& device) {
    if (device == "cpu") return OffloadTarget::kCpu;
    if (device == "nvme") return OffloadTarget::kNvme;
    return OffloadTarget::kNone;
  };
  auto has_path = [](const Json* offload) {
    const Json* p = get(offload, "nvme_path");
    return p != nullptr && !p->is_null() && !(p->is_string() && p->get<std::string>().empty());
  };
  ZeroPlacement placement;
  placement.stage = f.stage ? std::optional<int>(static_cast<int>(*f.stage)) : std::nullopt;
  placement.stage_text = f.stage_text;
  placement.optimizer_offload = target(f.optim_device);
  placement.param_offload = target(f.param_device);
  placement.optimizer_nvme_path = has_path(f.offload_optimizer);
  placement.param_nvme_path = has_path(f.offload_param);
  placement.ratio = as_double(get(f.offload_optimizer, "ratio"));
  if (const Json* type = get(get(&config, "optimizer"), "type"); type && type->is_string()) {
    placement.lamb = lower(type->get<std::string>()) == "lamb";
  }
  placement.world_size = world_size;
  placement.bf16 = is_true(get(bf16, "enabled"));
  placement.bf16_master_weights = bf16_master;
  placement.bf16_optimizer_states = bf16_states;
  for (const ZeroRuleFinding& r : apply_zero_rules(placement).findings) {
    if (r.error) {
      ctx.error(r.key, r.message, r.hint);
    } else {
      ctx.warning(r.key, r.message, r.hint);
    }
  }
  if (is_true(get(f.zero, "legacy_stage1"))) {
    ctx.error("zero_optimization.legacy_stage1", "the legacy stage 1 implementation was removed",
              "remove the key");
  }
  // Stage 2/3 with reduce_scatter assert these (stage_1_and_2.py, stage3.py).
  const Json* rs = get(f.zero, "reduce_scatter");
  bool reduce_scatter = rs == nullptr || !rs->is_boolean() || rs->get<bool>();
  if (f.stage && *f.stage >= 2 && reduce_scatter) {
    if (auto pf = as_double(get(&config, "gradient_predivide_factor")); pf && *pf != 1.0) {
      ctx.error("gradient_predivide_factor",
                fmt::format("{} is not supported with zero_optimization.reduce_scatter at "
                            "zero_optimization.stage {}",
                            ctx.quote("gradient_predivide_factor",
                                      *get(&config, "gradient_predivide_factor")),
                            f.stage_text),
                "use 1.0 or set zero_optimization.reduce_scatter to false");
    }
    if (is_true(get(&config, "prescale_gradients"))) {
      ctx.error("prescale_gradients",
                fmt::format("not supported with zero_optimization.reduce_scatter at "
                            "zero_optimization.stage {}",
                            f.stage_text),
                "set prescale_gradients to false or zero_optimization.reduce_scatter to false");
    }
  }
  // Stage-3-only keys set below stage 3 do nothing; say so (DeepSpeed is silent).
  if (below3 && f.zero != nullptr) {
    const KeySpec* zero_spec = find_key(root_schema(), "zero_optimization");
    for (const auto& [key, value] : f.zero->items()) {
      const KeySpec* k = find_key(*zero_spec->block, key);
      if (k == nullptr || k->min_stage <= *f.stage || is_auto(&value)) continue;
      if (!k->default_json.empty() && value == Json::parse(k->default_json)) continue;
      ctx.warning(
          path_join("zero_optimization", key),
          fmt::format("only used by ZeRO stage 3 (zero_optimization.stage is {})", f.stage_text));
    }
  }
}

void check_batch(Context& ctx, const Json& config, const ValidateOptions& options) {
  static constexpr std::string_view kKeys[] = {"train_batch_size", "train_micro_batch_size_per_gpu",
                                               "gradient_accumulation_steps"};
  const Json* elastic = get(&config, "elasticity");
  if (is_true(get(elastic, "enabled")) && !is_true(get(elastic, "ignore_non_elastic_batch_info"))) {
    for (std::string_view key : kKeys) {
      if (get(&config, key) != nullptr) {
        ctx.error(std::string(key),
                  "cannot be given when elasticity.enabled is true (the elastic solver picks the "
                  "batch sizes)",
                  "remove it or set elasticity.ignore_non_elastic_batch_info to true");
      }
    }
    return;
  }
  if (!options.world_size) return;
  BatchTriad given;
  std::optional<int64_t>* slots[] = {&given.train_batch_size, &given.micro_batch_per_gpu,
                                     &given.gradient_accumulation_steps};
  for (int i = 0; i < 3; ++i) {
    const Json* v = get(&config, kKeys[i]);
    if (is_auto(v)) return;  // the trainer's flags resolve it; nothing to check yet
    if (v == nullptr || v->is_null()) continue;
    *slots[i] = as_int(v);
    if (!*slots[i] || **slots[i] <= 0) return;  // type/range error already reported
  }
  std::string path;
  auto derived = derive_batch_triad(given, *options.world_size, &path);
  if (!derived.ok()) ctx.error(path, derived.status().message());
}

}  // namespace

StatusOr<BatchTriad> derive_batch_triad(const BatchTriad& given, int64_t world_size,
                                        std::string* path) {
  auto fail = [&](std::string_view p, std::string message) -> Status {
    if (path != nullptr) *path = std::string(p);
    return invalid_argument("{}", message);
  };
  if (world_size <= 0) return fail("(root)", fmt::format("world size {} must be > 0", world_size));
  auto [tbs, mbs, gas] = given;
  const int64_t w = world_size;
  // micro × accumulation × world beyond int64: no real batch is that large, and wrapped arithmetic
  // must not pass the equality check below.
  auto overflow = [&](std::string_view p, int64_t micro, int64_t accum) -> Status {
    return fail(p, fmt::format("train_micro_batch_size_per_gpu {} * gradient_accumulation_steps {} "
                               "* world size {} overflows a 64-bit integer (at most {})",
                               micro, accum, w, INT64_MAX));
  };
  if (tbs && mbs && gas) {
    // nothing to derive
  } else if (tbs && mbs) {
    gas = *tbs / *mbs / w;
  } else if (tbs && gas) {
    mbs = *tbs / w / *gas;
  } else if (mbs && gas) {
    auto product = checked_product({*mbs, *gas, w});
    if (!product) return overflow("gradient_accumulation_steps", *mbs, *gas);
    tbs = *product;
  } else if (tbs) {
    gas = 1;
    mbs = *tbs / w;
  } else if (mbs) {
    gas = 1;
    auto product = checked_mul(*mbs, w);
    if (!product) return overflow("train_micro_batch_size_per_gpu", *mbs, 1);
    tbs = *product;
  } else {
    return fail(
        given.gradient_accumulation_steps ? "train_micro_batch_size_per_gpu" : "train_batch_size",
        "missing: either train_batch_size or train_micro_batch_size_per_gpu needs to be "
        "provided");
  }
  if (*mbs <= 0) {
    return fail("train_micro_batch_size_per_gpu",
                fmt::format("derived as {} = train_batch_size {} / world size {} / "
                            "gradient_accumulation_steps {}; has to be greater than 0",
                            *mbs, *tbs, w, *gas));
  }
  if (*gas <= 0) {
    return fail("gradient_accumulation_steps",
                fmt::format("derived as {} = train_batch_size {} / train_micro_batch_size_per_gpu "
                            "{} / world size {}; has to be greater than 0",
                            *gas, *tbs, *mbs, w));
  }
  // Checked: a product that wraps around could otherwise equal train_batch_size by accident.
  auto product = checked_product({*mbs, *gas, w});
  if (!product) return overflow("gradient_accumulation_steps", *mbs, *gas);
  if (*tbs != *product) {
    return fail("train_batch_size",
                fmt::format("train_batch_size is not equal to train_micro_batch_size_per_gpu * "
                            "gradient_accumulation_steps * world_size: {} != {} * {} * {}",
                            *tbs, *mbs, *gas, w));
  }
  return BatchTriad{tbs, mbs, gas};
}

// activation_checkpointing: DeepSpeed's options for its checkpointing of model-parallel
// activations. Without model parallelism (ZeRO.cpp is data-parallel) partitioning means nothing;
// say so rather than accept it silently.
void check_activation_checkpointing(Context& ctx, const Json& config) {
  const Json* ac = get(&config, "activation_checkpointing");
  if (ac == nullptr || !ac->is_object()) return;
  if (is_true(get(ac, "partition_activations"))) {
    ctx.warning("activation_checkpointing.partition_activations",
                "partitions checkpointed activations across model-parallel ranks; ZeRO.cpp is "
                "data-parallel only, so there is nothing to partition (no effect)",
                "checkpointed block inputs stay whole on each rank");
  }
  if (is_true(get(ac, "contiguous_memory_optimization"))) {
    ctx.warning("activation_checkpointing.contiguous_memory_optimization",
                "only acts on partitioned activations (partition_activations), which need model "
                "parallelism; no effect here");
  }
}

void check_rules(Context& ctx, const Json& config, const ValidateOptions& options) {
  Facts facts = read_facts(ctx, config);
  check_typed_block(ctx, config, "optimizer", optimizer_types());
  check_typed_block(ctx, config, "scheduler", scheduler_types());
  check_precision(ctx, config, facts);
  check_optimizer_with_zero(ctx, config, facts);
  check_zero(ctx, config, facts, static_cast<int>(options.world_size.value_or(0)));
  check_activation_checkpointing(ctx, config);
  check_batch(ctx, config, options);
}

}  // namespace zero::config
