// Internal to the config.json readers (model_config.cc, rope_config.cc): typed key readers whose
// errors name the source file and the key.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/model_config.h"

namespace zero::model::config_json {

using nlohmann::json;

inline const char* json_type_name(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number_float()) return "a float";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

// Typed key readers. Every error names the source file and the key.
class Reader {
 public:
  Reader(const json& j, std::string_view source, std::string prefix = "")
      : j_(j), source_(source), prefix_(std::move(prefix)) {}

  // The key as errors name it: "rope_parameters.factor" inside a nested object.
  std::string name(const std::string& key) const { return prefix_ + key; }

  const json* find(const std::string& key) const {
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }

  Status type_error(const std::string& key, const char* want, const json& got) const {
    return invalid_argument("{}: {}: expected {}, got {}", source_, name(key), want,
                            json_type_name(got));
  }

  // A positive integer of at most `max`; integral floats (e.g. 4096.0) are accepted. The bound is
  // checked here, before anything is sized from the value.
  StatusOr<int64_t> positive_int(const std::string& key, std::optional<int64_t> fallback,
                                 int64_t max = kMaxModelDimension) const {
    const json* v = find(key);
    if (v == nullptr || v->is_null()) {
      if (fallback) return *fallback;
      return invalid_argument("{}: {}: missing (required for model_type \"{}\")", source_,
                              name(key), j_.value("model_type", std::string("?")));
    }
    int64_t out = 0;
    if (v->is_number_integer() || v->is_number_unsigned()) {
      out = v->get<int64_t>();
    } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 9e15) {
      out = static_cast<int64_t>(v->get<double>());
    } else {
      return type_error(key, "a positive integer", *v);
    }
    if (out <= 0)
      return invalid_argument("{}: {}: must be positive, got {}", source_, name(key), out);
    if (out > max) {
      return invalid_argument("{}: {}: {} is larger than the limit {}", source_, name(key), out,
                              max);
    }
    return out;
  }

  StatusOr<double> positive_number(const std::string& key, std::optional<double> fallback) const {
    const json* v = find(key);
    if (v == nullptr || v->is_null()) {
      if (fallback) return *fallback;
      return invalid_argument("{}: {}: missing", source_, name(key));
    }
    if (!v->is_number()) return type_error(key, "a number", *v);
    double out = v->get<double>();
    if (!(out > 0) || !std::isfinite(out)) {
      return invalid_argument("{}: {}: must be a positive finite number, got {}", source_,
                              name(key), out);
    }
    return out;
  }

  StatusOr<bool> boolean(const std::string& key, bool fallback) const {
    const json* v = find(key);
    if (v == nullptr || v->is_null()) return fallback;
    if (!v->is_boolean()) return type_error(key, "true or false", *v);
    return v->get<bool>();
  }

  StatusOr<std::string> string(const std::string& key, const std::string& fallback) const {
    const json* v = find(key);
    if (v == nullptr || v->is_null()) return fallback;
    if (!v->is_string()) return type_error(key, "a string", *v);
    return v->get<std::string>();
  }

  std::string_view source() const { return source_; }

 private:
  const json& j_;
  std::string_view source_;
  std::string prefix_;
};

}  // namespace zero::model::config_json
