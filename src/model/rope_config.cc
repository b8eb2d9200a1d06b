// The RoPE keys of an HF config.json: 4.x top-level rope_theta + rope_scaling and transformers-5
// rope_parameters, read into ModelConfig and written back in the layout read.
#include "model/rope_config.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "model/config_reader.h"

namespace zero::model::config_json {

double yarn_mscale(double scale, double m) {
  return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}

namespace {

// longrope (Phi-3; only there, the one family whose transformers model is tested with it): D/2
// short and long factors, `factor` (default max_position_embeddings / original_max_position_
// embeddings) and the attention factor sqrt(1 + ln(factor) / ln(original)) unless given.
Status parse_longrope(const Reader& r, const ModelConfig& c, const std::string& type_key,
                      kernels::cpu::RopeScaling& out) {
  if (c.model_type != "phi3") {
    return unimplemented("{}: {}: \"longrope\" is not supported for model_type \"{}\" (phi3 only)",
                         r.source(), r.name(type_key), c.model_type);
  }
  const int64_t half = c.head_dim() / 2;
  for (const char* key : {"short_factor", "long_factor"}) {
    const json* v = r.find(key);
    if (v == nullptr || !v->is_array() || static_cast<int64_t>(v->size()) != half) {
      return invalid_argument("{}: {}: expected an array of {} numbers (head_dim / 2)", r.source(),
                              r.name(key), half);
    }
    std::vector<double>& dst =
        std::string(key) == "short_factor" ? out.short_factor : out.long_factor;
    for (const json& f : *v) {
      if (!f.is_number() || !(f.get<double>() > 0) || !std::isfinite(f.get<double>())) {
        return invalid_argument("{}: {}: {} is not a positive number", r.source(), r.name(key),
                                f.dump());
      }
      dst.push_back(f.get<double>());
    }
  }
  const double orig = static_cast<double>(out.original_max_position_embeddings);
  auto factor = r.positive_number("factor", static_cast<double>(c.max_position_embeddings) / orig);
  if (!factor.ok()) return factor.status();
  out.factor = *factor;
  const double derived =
      out.factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(out.factor) / std::log(orig));
  auto attention = r.positive_number("attention_factor", derived);
  if (!attention.ok()) return attention.status();
  out.attention_factor = *attention;
  return ok_status();
}

// yarn: factor (default max_position_embeddings / original), beta_fast / beta_slow, truncate, and
// the attention factor: given, from the mscale pair, or transformers' get_mscale(factor).
Status parse_yarn(const Reader& r, const ModelConfig& c, kernels::cpu::RopeScaling& out) {
  auto number = [&](const char* key, std::optional<double> fallback, double& dst) -> Status {
    auto v = r.positive_number(key, fallback);
    if (!v.ok()) return v.status();
    dst = *v;
    return ok_status();
  };
  // factor null: max_position_embeddings / original_max_position_embeddings (as HF).
  ZERO_RETURN_IF_ERROR(number("factor",
                              static_cast<double>(c.max_position_embeddings) /
                                  static_cast<double>(out.original_max_position_embeddings),
                              out.factor));
  // HF: `beta_fast or 32`, `beta_slow or 1`.
  ZERO_RETURN_IF_ERROR(number("beta_fast", 32.0, out.beta_fast));
  ZERO_RETURN_IF_ERROR(number("beta_slow", 1.0, out.beta_slow));
  auto truncate = r.boolean("truncate", true);
  if (!truncate.ok()) return truncate.status();
  out.truncate = *truncate;
  double attention = 0, mscale = 0, mscale_all = 0;
  const json* af = r.find("attention_factor");
  const json* ms = r.find("mscale");
  const json* msa = r.find("mscale_all_dim");
  if (af != nullptr && !af->is_null()) {
    ZERO_RETURN_IF_ERROR(number("attention_factor", std::nullopt, attention));
  } else if (ms != nullptr && !ms->is_null() && msa != nullptr && !msa->is_null()) {
    ZERO_RETURN_IF_ERROR(number("mscale", std::nullopt, mscale));
    ZERO_RETURN_IF_ERROR(number("mscale_all_dim", std::nullopt, mscale_all));
    attention = yarn_mscale(out.factor, mscale) / yarn_mscale(out.factor, mscale_all);
  } else {
    attention = yarn_mscale(out.factor, 1.0);
  }
  out.attention_factor = attention;
  return ok_status();
}

// One RoPE object: 4.x `rope_scaling` or transformers-5 `rope_parameters` (`where` is the key, for
// errors). Every key must be known; keys that change the math must be implemented.
// top_orig: a top-level original_max_position_embeddings, which transformers 5 puts into the rope
// parameters of llama3 / yarn (standardize_rope_params).
Status parse_rope_object(const json& obj, std::string_view source, const std::string& where,
                         const ModelConfig& c, kernels::cpu::RopeScaling& out,
                         std::optional<double>& theta, std::optional<int64_t> top_orig) {
  static const char* const kKnown[] = {"rope_type",
                                       "type",
                                       "rope_theta",
                                       "factor",
                                       "low_freq_factor",
                                       "high_freq_factor",
                                       "original_max_position_embeddings",
                                       "beta_fast",
                                       "beta_slow",
                                       "attention_factor",
                                       "truncate",
                                       "mscale",
                                       "mscale_all_dim",
                                       "partial_rotary_factor",
                                       "short_factor",
                                       "long_factor"};
  for (const auto& [key, value] : obj.items()) {
    if (value.is_object()) {
      return unimplemented(
          "{}: {}.{}: per-layer-type RoPE parameters are not supported (one set for all layers)",
          source, where, key);
    }
    if (std::find(std::begin(kKnown), std::end(kKnown), key) == std::end(kKnown)) {
      return unimplemented("{}: {}.{}: unknown RoPE key (value {}) is not supported", source, where,
                           key, value.dump());
    }
  }
  Reader r(obj, source, where + ".");
  if (const json* t = r.find("rope_theta"); t != nullptr && !t->is_null()) {
    auto v = r.positive_number("rope_theta", std::nullopt);
    if (!v.ok()) return v.status();
    theta = *v;
  }
  if (const json* p = r.find("partial_rotary_factor"); p != nullptr && !p->is_null()) {
    if (!p->is_number() || p->get<double>() != 1.0) {
      return unimplemented("{}: {}.partial_rotary_factor: {} is not supported (only 1.0)", source,
                           where, p->dump());
    }
  }
  const std::string type_key = obj.contains("rope_type") ? "rope_type" : "type";
  auto type = r.string(type_key, "default");
  if (!type.ok()) return type.status();
  out = kernels::cpu::RopeScaling{};
  out.type = *type;
  auto number = [&](const char* key, std::optional<double> fallback, double& dst) -> Status {
    auto v = r.positive_number(key, fallback);
    if (!v.ok()) return v.status();
    dst = *v;
    return ok_status();
  };
  if (out.type == "su" && c.model_type == "phi3") out.type = "longrope";  // as Phi3Config does
  if (c.model_type == "phi3" && out.type != "default" && out.type != "longrope") {
    // Phi3Config reads "yarn" as longrope too, and refuses the others: refused rather than guessed.
    return unimplemented(
        "{}: {}.{}: \"{}\" is not supported for model_type \"phi3\" (default, "
        "longrope, su)",
        source, where, type_key, out.type);
  }
  if (out.type == "default") return ok_status();
  if (out.type == "linear" || out.type == "dynamic") {
    ZERO_RETURN_IF_ERROR(number("factor", std::nullopt, out.factor));
    out.max_position_embeddings = c.max_position_embeddings;
    return ok_status();
  }
  // llama3 and yarn: original_max_position_embeddings defaults to the top-level key, else to
  // max_position_embeddings, as in transformers' standardize_rope_params.
  auto orig = r.positive_int("original_max_position_embeddings",
                             top_orig.value_or(c.max_position_embeddings));
  if (!orig.ok()) return orig.status();
  if (top_orig && *orig != *top_orig) {
    return invalid_argument(
        "{}: {}.original_max_position_embeddings: {} disagrees with the top-level "
        "original_max_position_embeddings {} (remove one)",
        source, where, *orig, *top_orig);
  }
  out.original_max_position_embeddings = *orig;
  if (out.type == "llama3") {
    ZERO_RETURN_IF_ERROR(number("factor", std::nullopt, out.factor));
    ZERO_RETURN_IF_ERROR(number("low_freq_factor", std::nullopt, out.low_freq_factor));
    ZERO_RETURN_IF_ERROR(number("high_freq_factor", std::nullopt, out.high_freq_factor));
    if (out.low_freq_factor == out.high_freq_factor) {
      return invalid_argument("{}: {}.high_freq_factor: must differ from low_freq_factor ({})",
                              source, where, out.low_freq_factor);
    }
    return ok_status();
  }
  if (out.type == "longrope") return parse_longrope(r, c, type_key, out);
  if (out.type == "yarn") return parse_yarn(r, c, out);
  return unimplemented(
      "{}: {}.{}: \"{}\" is not supported (default, linear, dynamic, yarn, llama3; phi3: longrope)",
      source, where, type_key, out.type);
}

bool same_rope(const kernels::cpu::RopeScaling& a, const kernels::cpu::RopeScaling& b) {
  return a.type == b.type && a.factor == b.factor && a.low_freq_factor == b.low_freq_factor &&
         a.high_freq_factor == b.high_freq_factor &&
         a.original_max_position_embeddings == b.original_max_position_embeddings &&
         a.beta_fast == b.beta_fast && a.beta_slow == b.beta_slow && a.truncate == b.truncate &&
         a.attention_factor == b.attention_factor && a.short_factor == b.short_factor &&
         a.long_factor == b.long_factor;
}

}  // namespace

// Both layouts: 4.x top-level rope_theta + rope_scaling, transformers-5 rope_parameters
// {rope_type, rope_theta, ...}. Present together, they must agree.
Status parse_rope(const json& j, const Reader& r, ModelConfig& c) {
  const std::string_view source = r.source();
  if (const json* p = r.find("partial_rotary_factor"); p != nullptr && !p->is_null()) {
    if (!p->is_number() || p->get<double>() != 1.0) {
      return unimplemented("{}: partial_rotary_factor: {} is not supported (only 1.0)", source,
                           p->dump());
    }
  }
  std::optional<int64_t> top_orig;
  if (const json* o = r.find("original_max_position_embeddings"); o != nullptr && !o->is_null()) {
    ZERO_ASSIGN_OR_RETURN(int64_t v,
                          r.positive_int("original_max_position_embeddings", std::nullopt));
    top_orig = v;
  }
  std::optional<double> old_theta;
  if (const json* t = r.find("rope_theta"); t != nullptr && !t->is_null()) {
    ZERO_ASSIGN_OR_RETURN(double v, r.positive_number("rope_theta", std::nullopt));
    old_theta = v;
  }
  std::optional<kernels::cpu::RopeScaling> old_scaling;
  if (const json* s = r.find("rope_scaling"); s != nullptr && !s->is_null()) {
    if (!s->is_object()) {
      return invalid_argument("{}: rope_scaling: expected null or an object, got {}", source,
                              json_type_name(*s));
    }
    kernels::cpu::RopeScaling scaling;
    std::optional<double> theta_inside;
    ZERO_RETURN_IF_ERROR(
        parse_rope_object(*s, source, "rope_scaling", c, scaling, theta_inside, top_orig));
    if (theta_inside && old_theta && *theta_inside != *old_theta) {
      return invalid_argument("{}: rope_scaling.rope_theta: {} disagrees with rope_theta {}",
                              source, *theta_inside, *old_theta);
    }
    if (theta_inside) old_theta = theta_inside;
    old_scaling = scaling;
  }
  const json* params = r.find("rope_parameters");
  if (params == nullptr || params->is_null()) {
    c.rope_theta = old_theta.value_or(10000.0);
    c.rope_scaling = old_scaling.value_or(kernels::cpu::RopeScaling{});
    return ok_status();
  }
  if (!params->is_object()) {
    return invalid_argument("{}: rope_parameters: expected an object, got {}", source,
                            json_type_name(*params));
  }
  std::optional<double> new_theta;
  ZERO_RETURN_IF_ERROR(parse_rope_object(*params, source, "rope_parameters", c, c.rope_scaling,
                                         new_theta, top_orig));
  // transformers fills a missing rope_parameters.rope_theta from the top-level key.
  c.rope_theta = new_theta.value_or(old_theta.value_or(10000.0));
  if (old_theta && *old_theta != c.rope_theta) {
    return invalid_argument(
        "{}: rope_theta: {} disagrees with rope_parameters.rope_theta {} (remove one)", source,
        *old_theta, c.rope_theta);
  }
  if (old_scaling && !same_rope(*old_scaling, c.rope_scaling)) {
    return invalid_argument(
        "{}: rope_scaling ({}) disagrees with rope_parameters ({}) (remove one)", source,
        j.at("rope_scaling").dump(), params->dump());
  }
  return ok_status();
}

// The RoPE object for `s` (without rope_theta): the keys transformers reads for its type. yarn's
// optional keys are written when `input` (the rope object read, or null) had them or when their
// value is not the one transformers derives without them, so a save keeps the keys it was given.
json rope_object(const kernels::cpu::RopeScaling& s, const json* input) {
  auto had = [&](const char* key) {
    return input != nullptr && input->is_object() && input->contains(key);
  };
  json o = {{"rope_type", s.type}};
  if (had("partial_rotary_factor")) o["partial_rotary_factor"] = 1.0;  // the only value read
  if (s.type == "default") return o;
  if (s.type == "longrope") {
    o["short_factor"] = s.short_factor;
    o["long_factor"] = s.long_factor;
    o["original_max_position_embeddings"] = s.original_max_position_embeddings;
    if (had("factor")) o["factor"] = s.factor;
    if (had("attention_factor")) o["attention_factor"] = s.attention_factor;
    return o;
  }
  o["factor"] = s.factor;
  if (s.type == "llama3") {
    o["low_freq_factor"] = s.low_freq_factor;
    o["high_freq_factor"] = s.high_freq_factor;
  }
  if (s.type == "llama3" || s.type == "yarn") {
    o["original_max_position_embeddings"] = s.original_max_position_embeddings;
  }
  if (s.type == "yarn") {
    if (had("beta_fast") || s.beta_fast != 32.0) o["beta_fast"] = s.beta_fast;
    if (had("beta_slow") || s.beta_slow != 1.0) o["beta_slow"] = s.beta_slow;
    if (had("attention_factor") || s.attention_factor != yarn_mscale(s.factor, 1.0)) {
      o["attention_factor"] = s.attention_factor;
    }
    if (had("truncate") || !s.truncate) o["truncate"] = s.truncate;
  }
  return o;
}

}  // namespace zero::model::config_json

namespace zero::model::config_json {

Status parse_gemma3_rope(const json& j, const Reader& r, ModelConfig& c) {
  const std::string_view source = r.source();
  std::optional<double> top_theta, local_theta;
  if (const json* t = r.find("rope_theta"); t != nullptr && !t->is_null()) {
    ZERO_ASSIGN_OR_RETURN(double v, r.positive_number("rope_theta", std::nullopt));
    top_theta = v;
  }
  if (const json* t = r.find("rope_local_base_freq"); t != nullptr && !t->is_null()) {
    ZERO_ASSIGN_OR_RETURN(double v, r.positive_number("rope_local_base_freq", std::nullopt));
    local_theta = v;
  }
  const json* params = r.find("rope_parameters");
  if (params == nullptr || params->is_null()) {
    c.rope_theta = top_theta.value_or(1e6);
    c.local_rope_theta = local_theta.value_or(1e4);
    c.local_rope_scaling = kernels::cpu::RopeScaling{};
    c.rope_scaling = kernels::cpu::RopeScaling{};
    if (const json* s = r.find("rope_scaling"); s != nullptr && !s->is_null()) {
      if (!s->is_object()) {
        return invalid_argument("{}: rope_scaling: expected null or an object", source);
      }
      std::optional<double> inside;
      ZERO_RETURN_IF_ERROR(
          parse_rope_object(*s, source, "rope_scaling", c, c.rope_scaling, inside, std::nullopt));
    }
    return ok_status();
  }
  if (!params->is_object()) {
    return invalid_argument("{}: rope_parameters: expected an object, got {}", source,
                            json_type_name(*params));
  }
  for (const auto& [key, value] : params->items()) {
    if (key != "full_attention" && key != "sliding_attention") {
      return unimplemented(
          "{}: rope_parameters.{}: expected full_attention and sliding_attention objects", source,
          key);
    }
  }
  struct Side {
    const char* key;
    double fallback;
    double& theta;
    kernels::cpu::RopeScaling& scaling;
  };
  const Side sides[] = {
      {"full_attention", top_theta.value_or(1e6), c.rope_theta, c.rope_scaling},
      {"sliding_attention", local_theta.value_or(1e4), c.local_rope_theta, c.local_rope_scaling}};
  for (const Side& side : sides) {
    side.scaling = kernels::cpu::RopeScaling{};
    side.theta = side.fallback;
    const auto it = params->find(side.key);
    if (it == params->end() || it->is_null()) continue;
    if (!it->is_object()) {
      return invalid_argument("{}: rope_parameters.{}: expected an object", source, side.key);
    }
    std::optional<double> theta;
    ZERO_RETURN_IF_ERROR(parse_rope_object(*it, source, std::string("rope_parameters.") + side.key,
                                           c, side.scaling, theta, std::nullopt));
    if (theta) side.theta = *theta;
  }
  if (top_theta && *top_theta != c.rope_theta) {
    return invalid_argument(
        "{}: rope_theta: {} disagrees with rope_parameters.full_attention.rope_theta {}", source,
        *top_theta, c.rope_theta);
  }
  (void)j;
  return ok_status();
}

void write_gemma3_rope(const ModelConfig& c, json& j, bool v5) {
  if (v5) {
    const json read = j.contains("rope_parameters") ? j["rope_parameters"] : json::object();
    auto side = [&](const char* key, const kernels::cpu::RopeScaling& s, double theta) {
      const json* input = read.is_object() && read.contains(key) ? &read.at(key) : nullptr;
      json o = rope_object(s, input);
      o["rope_theta"] = theta;
      return o;
    };
    j["rope_parameters"] = {
        {"full_attention", side("full_attention", c.rope_scaling, c.rope_theta)},
        {"sliding_attention", side("sliding_attention", c.local_rope_scaling, c.local_rope_theta)}};
  }
  if (!v5 || j.contains("rope_theta")) j["rope_theta"] = c.rope_theta;
  if (!v5 || j.contains("rope_local_base_freq")) j["rope_local_base_freq"] = c.local_rope_theta;
  if (!v5 || j.contains("rope_scaling")) {
    const json* input = j.contains("rope_scaling") ? &j["rope_scaling"] : nullptr;
    j["rope_scaling"] =
        c.rope_scaling.type == "default" ? json(nullptr) : rope_object(c.rope_scaling, input);
  }
}

}  // namespace zero::model::config_json
