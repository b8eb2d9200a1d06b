// Effective-config builder and renderer (effective.h). Walks the schema rather than the document so
// every known key appears once, under its canonical name, in schema order.
#include "config/effective.h"

#include <cmath>

#include "config/schema.h"
#include "config/validate.h"

namespace zero::config {
namespace {

const Json* lookup(const Json* obj, std::string_view key, std::string_view alias = {}) {
  if (obj == nullptr || !obj->is_object()) return nullptr;
  if (auto it = obj->find(key); it != obj->end()) return &*it;
  if (!alias.empty()) {
    if (auto it = obj->find(alias); it != obj->end()) return &*it;
  }
  return nullptr;
}

bool is_auto(const Json& v) { return v.is_string() && v == "auto"; }

// Integral floats in integer fields ("2e8") become integers, so the trainer reads int64.
Json normalise(const KeySpec& k, const Json& v) {
  if (k.kind == Kind::kInt && v.is_number_float()) {
    double d = v.get<double>();
    if (std::floor(d) == d && std::fabs(d) < 9.2e18) return Json(static_cast<int64_t>(d));
  }
  return v;
}

// The fp16 keys whose presence makes DeepSpeed build its loss scaler from the block's values
// (fp16 defaults 2^16 / hysteresis 2); without any of them it uses DynamicLossScaler's own
// defaults, 2^32 and hysteresis 1 (reference §1.6).
constexpr std::string_view kDynamicScalerKeys[] = {"initial_scale_power", "loss_scale_window",
                                                   "min_loss_scale", "hysteresis",
                                                   "consecutive_hysteresis"};

class Builder {
 public:
  explicit Builder(EffectiveConfig& out) : out_(out) {}

  void fill_block(const BlockSpec& spec, const Json* in, Json& out, const std::string& path) {
    out = Json::object();
    for (const KeySpec& k : spec.keys) {
      if (!k.deprecated_by.empty()) continue;  // read through its successor below
      std::string p = path_join(path, k.name);
      Origin from = Origin::kFile;
      Json mapped;
      const Json* v = lookup(in, k.name, k.alias);
      if (v == nullptr) {
        if (const KeySpec* old = deprecated_source(spec, in, k.name)) {
          const Json& old_value = (*in)[std::string(old->name)];
          if (k.kind == Kind::kBlock && old->kind == Kind::kBool) {
            // cpu_offload: true -> offload_optimizer.device = "cpu" (DeepSpeed's mapping).
            if (old_value == true) mapped = Json{{"device", "cpu"}};
          } else {
            mapped = old_value;
          }
          if (!mapped.is_null()) {
            v = &mapped;
            from = Origin::kDerived;
          }
        }
      }
      if (k.kind == Kind::kOpenMap && k.name == "params" &&
          (spec.name == "optimizer" || spec.name == "scheduler")) {
        fill_params(spec.name == "optimizer", in, v, out["params"], p);
        continue;
      }
      if (v != nullptr && is_auto(*v)) {
        out[std::string(k.name)] = "auto";
        out_.origins[p] = Origin::kAuto;
        continue;
      }
      if (k.kind == Kind::kBlock) {
        if (v == nullptr && k.default_json.empty()) continue;
        fill_block(*k.block, v != nullptr && v->is_object() ? v : nullptr, out[std::string(k.name)],
                   p);
        if (from == Origin::kDerived) mark(out[std::string(k.name)], p, Origin::kDerived);
        continue;
      }
      if (v != nullptr) {
        out[std::string(k.name)] = normalise(k, *v);
        out_.origins[p] = from;
      } else if (!k.default_json.empty()) {
        out[std::string(k.name)] = Json::parse(k.default_json);
        out_.origins[p] = Origin::kDefault;
      }
    }
    if (spec.unknown == UnknownKeys::kAllow && in != nullptr) {
      for (const auto& [key, value] : in->items()) {
        if (find_key(spec, key) != nullptr || (!key.empty() && key[0] == '_')) continue;
        out[key] = value;
        out_.origins[path_join(path, key)] = is_auto(value) ? Origin::kAuto : Origin::kFile;
      }
    }
  }

 private:
  static const KeySpec* deprecated_source(const BlockSpec& spec, const Json* in,
                                          std::string_view successor) {
    for (const KeySpec& d : spec.keys) {
      if (d.deprecated_by == successor && lookup(in, d.name) != nullptr) return &d;
    }
    return nullptr;
  }

  // Re-marks every leaf under `node` (a block filled from a deprecated key).
  void mark(const Json& node, const std::string& path, Origin origin) {
    for (const auto& [key, value] : node.items()) {
      std::string p = path_join(path, key);
      if (value.is_object() && !out_.origins.contains(p)) {
        mark(value, p, origin);
      } else if (out_.origins[p] == Origin::kFile) {
        out_.origins[p] = origin;
      }
    }
  }

  void fill_params(bool optimizer, const Json* block_in, const Json* params, Json& out,
                   const std::string& path) {
    const Json* type = lookup(block_in, "type");
    const TypeSpec* spec = nullptr;
    if (type != nullptr && type->is_string()) {
      spec = find_type(optimizer ? optimizer_types() : scheduler_types(), type->get<std::string>());
    }
    if (params != nullptr && is_auto(*params)) {
      out = "auto";
      out_.origins[path] = Origin::kAuto;
      return;
    }
    if (spec != nullptr) {
      fill_block(*spec->params, params, out, path);
      return;
    }
    out = Json::object();
    if (params == nullptr || !params->is_object()) return;
    for (const auto& [key, value] : params->items()) {
      out[key] = value;
      out_.origins[path_join(path, key)] = is_auto(value) ? Origin::kAuto : Origin::kFile;
    }
  }

  EffectiveConfig& out_;
};

// Compact one-line JSON with ", " between list items (readable lists such as betas).
std::string render_value(const Json& v) {
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + render_value(v[i]);
    return out + "]";
  }
  return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void render(const EffectiveConfig& cfg, const Json& node, const std::string& path, int depth,
            std::string& out) {
  std::string indent(static_cast<size_t>(depth) * 2, ' ');
  std::vector<std::pair<std::string, std::string>> lines;  // text, marker
  size_t i = 0;
  out += "{\n";
  for (const auto& [key, value] : node.items()) {
    std::string p = path_join(path, key);
    bool last = ++i == node.size();
    std::string head = fmt::format("{}  {}: ", indent, render_value(Json(key)));
    bool leaf = cfg.origins.contains(p) || !value.is_object() || value.empty();
    if (!leaf) {
      out += head;
      render(cfg, value, p, depth + 1, out);
      out += last ? "\n" : ",\n";
      continue;
    }
    std::string line = head + render_value(value) + (last ? "" : ",");
    constexpr size_t kMarkerColumn = 64;
    size_t pad = line.size() < kMarkerColumn ? kMarkerColumn - line.size() : 1;
    out += line + std::string(pad, ' ') + "// " + origin_name(cfg.origin(p)) + "\n";
  }
  out += indent + "}";
}

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> parts;
  while (true) {
    size_t dot = path.find('.');
    parts.emplace_back(path.substr(0, dot));
    if (dot == std::string_view::npos) break;
    path.remove_prefix(dot + 1);
  }
  return parts;
}

bool same_value(const Json& a, const Json& b) {
  if (a.is_number() && b.is_number()) {
    double x = a.get<double>(), y = b.get<double>();
    return x == y || std::fabs(x - y) <= 1e-12 * std::max(std::fabs(x), std::fabs(y));
  }
  if (a.is_array() && b.is_array() && a.size() == b.size()) {
    for (size_t i = 0; i < a.size(); ++i) {
      if (!same_value(a[i], b[i])) return false;
    }
    return true;
  }
  return a == b;
}

}  // namespace

const char* origin_name(Origin origin) {
  switch (origin) {
    case Origin::kFile: return "file";
    case Origin::kDefault: return "default";
    case Origin::kAuto: return "auto";
    case Origin::kFlag: return "flag";
    case Origin::kDerived: return "derived";
  }
  return "default";
}

Origin EffectiveConfig::origin(std::string_view path) const {
  auto it = origins.find(path);
  return it == origins.end() ? Origin::kDefault : it->second;
}

StatusOr<EffectiveConfig> build_effective_config(const Json& config,
                                                 std::optional<int64_t> world_size) {
  if (!config.is_object()) return invalid_argument("a DeepSpeed config must be a JSON object");
  Json doc = config;
  coerce_string_booleans(doc);  // "enabled": "false" is false (validate_ds_config warned)
  EffectiveConfig eff;
  bool legacy_zero = false;
  if (auto it = doc.find("zero_optimization"); it != doc.end() && it->is_boolean()) {
    // Legacy form: true = stage 1 with allgather_size as the all-gather bucket.
    bool on = it->get<bool>();
    Json zero = {{"stage", on ? 1 : 0}};
    if (on) zero["allgather_bucket_size"] = doc.value("allgather_size", Json(500000000));
    *it = std::move(zero);
    legacy_zero = true;
  }
  Builder(eff).fill_block(root_schema(), &doc, eff.json, "");
  if (legacy_zero) {
    eff.origins["zero_optimization.stage"] = Origin::kDerived;
    if (eff.json["zero_optimization"]["stage"] == 1) {
      eff.origins["zero_optimization.allgather_bucket_size"] = Origin::kDerived;
    }
  }

  // overlap_comm: None means "stage == 3" (DeepSpeedZeroConfig.overlap_comm_valid).
  Json& zero = eff.json["zero_optimization"];
  if (zero["overlap_comm"].is_null()) zero["overlap_comm"] = zero["stage"] == 3;

  const Json* fp16_in = config.contains("fp16") ? &config["fp16"] : nullptr;
  if (fp16_in != nullptr && fp16_in->is_object()) {
    bool any = false;
    for (std::string_view k : kDynamicScalerKeys) any = any || fp16_in->contains(k);
    if (!any) {
      eff.json["fp16"]["initial_scale_power"] = 32;
      eff.json["fp16"]["hysteresis"] = 1;
    }
  }

  if (world_size) {
    const char* keys[] = {"train_batch_size", "train_micro_batch_size_per_gpu",
                          "gradient_accumulation_steps"};
    BatchTriad given;
    std::optional<int64_t>* slots[] = {&given.train_batch_size, &given.micro_batch_per_gpu,
                                       &given.gradient_accumulation_steps};
    bool any_auto = false;
    for (int i = 0; i < 3; ++i) {
      const Json& v = eff.json[keys[i]];
      any_auto = any_auto || is_auto(v);
      if (v.is_number_integer()) *slots[i] = v.get<int64_t>();
    }
    if (!any_auto) {
      ZERO_ASSIGN_OR_RETURN(BatchTriad triad, derive_batch_triad(given, *world_size));
      std::optional<int64_t>* done[] = {&triad.train_batch_size, &triad.micro_batch_per_gpu,
                                        &triad.gradient_accumulation_steps};
      for (int i = 0; i < 3; ++i) {
        if (!*slots[i]) {
          eff.json[keys[i]] = **done[i];
          eff.origins[keys[i]] = Origin::kDerived;
        }
      }
    }
  }
  return eff;
}

std::string render_effective_config(const EffectiveConfig& config) {
  std::string out;
  render(config, config.json, "", 0, out);
  out += "\n";
  return out;
}

Status resolve_from_flag(EffectiveConfig& config, std::string_view path, const Json& flag_value,
                         std::string_view flag_name) {
  std::vector<std::string> parts = split_path(path);
  Json* node = &config.json;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    Json& child = (*node)[parts[i]];
    if (child.is_null()) child = Json::object();
    if (!child.is_object()) {
      return invalid_argument("{}: cannot set {} from {}: {} is not an object", path, path,
                              flag_name, parts[i]);
    }
    node = &child;
  }
  Json& target = (*node)[parts.back()];
  std::string key(path);
  Origin origin = config.origin(key);
  bool explicit_value =
      (origin == Origin::kFile || origin == Origin::kDerived || origin == Origin::kFlag) &&
      config.origins.contains(key);
  if (explicit_value && !same_value(target, flag_value)) {
    return invalid_argument(
        "{}: the config sets {} but the flag {} says {} (remove one, or set the config value to "
        "\"auto\")",
        key, render_value(target), flag_name, render_value(flag_value));
  }
  target = flag_value;
  config.origins[key] = Origin::kFlag;
  return ok_status();
}

}  // namespace zero::config
