// Schema walk (types, ranges, unknown keys, aliases, deprecations) for validate_ds_config. The
// cross-key rules DeepSpeed asserts live in validate_rules.cc.
#include "config/validate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string_view>
#include <vector>

#include "config/did_you_mean.h"
#include "config/schema.h"
#include "config/validate_internal.h"

namespace zero::config {
namespace {

constexpr std::string_view kRootPath = "(root)";

bool iequals(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  });
}

std::vector<std::string_view> split_choices(std::string_view choices) {
  std::vector<std::string_view> out;
  while (!choices.empty()) {
    size_t bar = choices.find('|');
    out.push_back(choices.substr(0, bar));
    if (bar == std::string_view::npos) break;
    choices.remove_prefix(bar + 1);
  }
  return out;
}

const char* kind_name(const KeySpec& k) {
  switch (k.kind) {
    case Kind::kBool: return "true or false";
    case Kind::kInt: return "an integer";
    case Kind::kFloat: return "a number";
    case Kind::kString: return "a string";
    case Kind::kEnum: return "a string";
    case Kind::kNumList: return "a list of numbers";
    case Kind::kList: return "a list";
    case Kind::kBlock: return "an object";
    case Kind::kOpenMap: return "a value";
  }
  return "a value";
}

// Every key name that lives in exactly one modelled block, with that block's path: lets an
// unknown key be recognised as a known key placed in the wrong block.
class KeyIndex {
 public:
  KeyIndex() { add(root_schema(), ""); }
  // Full path of the unique block holding `key`, or nullopt when none or several do.
  std::optional<std::string> home_of(std::string_view key) const {
    auto it = homes_.find(std::string(key));
    if (it == homes_.end() || it->second.size() != 1) return std::nullopt;
    return it->second.front();
  }

 private:
  void add(const BlockSpec& block, const std::string& path) {
    for (const KeySpec& k : block.keys) {
      homes_[std::string(k.name)].push_back(path);
      if (!k.alias.empty()) homes_[std::string(k.alias)].push_back(path);
      if (k.kind == Kind::kBlock && k.block != nullptr && k.deprecated_by.empty()) {
        add(*k.block, path_join(path, k.name));
      }
    }
  }
  std::map<std::string, std::vector<std::string>> homes_;
};

// A boolean that was written as a string (the loader replaced it; the source map keeps the text).
bool written_as_string(const SourceMap* sources, const std::string& path) {
  if (sources == nullptr) return false;
  auto it = sources->find(path);
  return it != sources->end() && !it->second.raw.empty() && it->second.raw.front() == '"';
}

void warn_string_boolean(Context& ctx, const std::string& path, const std::string& written,
                         bool value) {
  ctx.warning(path,
              fmt::format("{} is a string; read as the boolean {} (pydantic's rule, as DeepSpeed "
                          "reads it)",
                          written, value ? "true" : "false"),
              fmt::format("write {} without quotes", value ? "true" : "false"));
}

class Walker {
 public:
  Walker(Context& ctx) : ctx_(ctx) {}

  void check_block(const BlockSpec& spec, const Json& obj, const std::string& path) {
    for (const auto& [key, value] : obj.items()) {
      if (!key.empty() && key[0] == '_') continue;  // "_comment" keys are comments
      std::string key_path = path_join(path, key);
      const KeySpec* k = find_key(spec, key);
      if (k == nullptr) {
        unknown_key(spec, key, key_path);
        continue;
      }
      check_value(*k, value, key_path);
    }
    check_spellings(spec, obj, path);
  }

  void check_value(const KeySpec& k, const Json& v, const std::string& path) {
    if (v.is_string() && v.get_ref<const std::string&>() == "auto") {
      if (k.kind == Kind::kBlock) {
        ctx_.error(path, "\"auto\" cannot stand for a whole block", "give the block as an object");
      }
      return;
    }
    if (v.is_null()) {
      if (!k.nullable && k.default_json != "null") {
        ctx_.error(path, fmt::format("null is not allowed here (expected {})", kind_name(k)));
      }
      return;
    }
    switch (k.kind) {
      case Kind::kBool:
        if (!v.is_boolean()) {
          ctx_.error(path, fmt::format("expected true or false, got {}", ctx_.quote(path, v)));
          return;
        }
        if (written_as_string(ctx_.sources, path)) {
          warn_string_boolean(ctx_, path, ctx_.sources->at(path).raw, v.get<bool>());
        }
        break;
      case Kind::kInt:
        if (!check_number(k, v, path, true)) return;
        break;
      case Kind::kFloat:
        if (!check_number(k, v, path, false)) return;
        break;
      case Kind::kString:
        if (!v.is_string()) {
          ctx_.error(path, fmt::format("expected a string, got {}", ctx_.quote(path, v)));
          return;
        }
        break;
      case Kind::kEnum:
        if (!check_enum(k, v, path)) return;
        break;
      case Kind::kNumList:
        if (!v.is_array()) {
          ctx_.error(path, fmt::format("expected a list of numbers, got {}", ctx_.quote(path, v)));
          return;
        }
        for (size_t i = 0; i < v.size(); ++i) {
          std::string item = path_index(path, i);
          if (!v[i].is_number() && !(v[i].is_string() && v[i] == "auto")) {
            ctx_.error(item, fmt::format("expected a number, got {}", ctx_.quote(item, v[i])));
          }
        }
        break;
      case Kind::kList:
        if (!v.is_array()) {
          ctx_.error(path, fmt::format("expected a list, got {}", ctx_.quote(path, v)));
          return;
        }
        break;
      case Kind::kBlock:
        if (!v.is_object()) {
          ctx_.error(path, fmt::format("expected an object, got {}", ctx_.quote(path, v)));
          return;
        }
        check_block(*k.block, v, path);
        break;
      case Kind::kOpenMap: break;
    }
    warn_if_unsupported(k, v, path);
  }

 private:
  bool check_number(const KeySpec& k, const Json& v, const std::string& path, bool integer) {
    if (!v.is_number()) {
      std::string hint;
      if (v.is_string()) hint = "write the number without quotes";
      ctx_.error(path,
                 fmt::format("expected {}, got {}", integer ? "an integer" : "a number",
                             ctx_.quote(path, v)),
                 hint);
      return false;
    }
    double d = v.get<double>();
    if (integer && v.is_number_float()) {
      // 2e8 and 1.0 are integers; 1.5 and 1e19 (beyond int64) are not.
      if (std::floor(d) != d) {
        ctx_.error(path, fmt::format("expected an integer, got {}", ctx_.quote(path, v)));
        return false;
      }
      if (d >= 9.2233720368547758e18 || d < -9.2233720368547758e18) {
        ctx_.error(path, fmt::format("{} does not fit in a 64-bit integer", ctx_.quote(path, v)));
        return false;
      }
    }
    if (integer && v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}) {
      ctx_.error(path, fmt::format("{} does not fit in a 64-bit integer", ctx_.quote(path, v)));
      return false;
    }
    bool below = k.min_exclusive ? !(d > k.min) : d < k.min;
    if (below) {
      ctx_.error(path, fmt::format("{} is out of range: must be {} {}", ctx_.quote(path, v),
                                   k.min_exclusive ? ">" : ">=", k.min));
      return false;
    }
    if (d > k.max) {
      ctx_.error(path,
                 fmt::format("{} is out of range: must be <= {}", ctx_.quote(path, v), k.max));
      return false;
    }
    return true;
  }

  bool check_enum(const KeySpec& k, const Json& v, const std::string& path) {
    std::vector<std::string_view> choices = split_choices(k.choices);
    std::string list;
    for (std::string_view c : choices) list += fmt::format("{}\"{}\"", list.empty() ? "" : ", ", c);
    if (!v.is_string()) {
      ctx_.error(path, fmt::format("expected one of {}, got {}", list, ctx_.quote(path, v)));
      return false;
    }
    const std::string& s = v.get_ref<const std::string&>();
    for (std::string_view c : choices) {
      if (s == c || (k.case_insensitive && iequals(s, c))) return true;
    }
    std::string hint;
    if (auto near = did_you_mean(s, choices)) hint = fmt::format("did you mean \"{}\"?", *near);
    ctx_.error(path, fmt::format("{} is not one of {}", ctx_.quote(path, v), list), hint);
    return false;
  }

  // A key for a feature ZeRO.cpp lacks draws a warning once it asks for something other than
  // DeepSpeed's default: a default value changes nothing, so nothing is silently dropped.
  void warn_if_unsupported(const KeySpec& k, const Json& v, const std::string& path) {
    if (k.support != Support::kUnimplemented) return;
    if (k.kind == Kind::kOpenMap) {
      if (v.is_null() || (v.is_object() && v.empty())) return;
      if (v.is_object() && v.contains("enabled") && v["enabled"] == false) return;
    } else if (!k.default_json.empty() && v == Json::parse(k.default_json)) {
      return;
    }
    ctx_.warning(path, "not implemented by ZeRO.cpp; this setting is ignored", std::string(k.note));
  }

  void unknown_key(const BlockSpec& spec, const std::string& key, const std::string& key_path) {
    std::vector<std::string_view> names;
    for (const KeySpec& k : spec.keys) {
      names.push_back(k.name);
      if (!k.alias.empty()) names.push_back(k.alias);
    }
    if (auto near = did_you_mean(key, names)) {
      ctx_.error(key_path, "unknown key",
                 fmt::format("did you mean {}?", path_join(parent_of(key_path), *near)));
      return;
    }
    if (auto home = index_.home_of(key); home && *home != spec_path(key_path)) {
      if (home->empty()) {
        ctx_.error(key_path, fmt::format("unknown key here; \"{}\" is a top-level key", key),
                   "move it to the top level of the config");
      } else {
        ctx_.error(key_path, fmt::format("unknown key here; \"{}\" belongs in {}", key, *home),
                   fmt::format("did you mean {}?", path_join(*home, key)));
      }
      return;
    }
    switch (spec.unknown) {
      case UnknownKeys::kError:
        ctx_.error(key_path, "unknown key",
                   fmt::format("DeepSpeed rejects unknown keys in {}", spec_label(spec, key_path)));
        break;
      case UnknownKeys::kTypo:
        ctx_.warning(key_path, "unknown key, ignored (DeepSpeed ignores it too)");
        break;
      case UnknownKeys::kAllow: break;
    }
  }

  static std::string parent_of(const std::string& path) {
    size_t dot = path.rfind('.');
    size_t bracket = path.rfind('[');
    size_t cut = std::string::npos;
    if (dot != std::string::npos) cut = dot;
    if (bracket != std::string::npos && (cut == std::string::npos || bracket > cut)) cut = bracket;
    return cut == std::string::npos ? "" : path.substr(0, cut);
  }
  static std::string spec_path(const std::string& key_path) { return parent_of(key_path); }
  static std::string spec_label(const BlockSpec& spec, const std::string& key_path) {
    std::string parent = parent_of(key_path);
    return parent.empty() ? std::string(spec.name) : parent;
  }

  // Aliases and deprecated keys: both spellings of one key, or an old key with its successor,
  // cannot be given together; deprecated keys alone draw a warning.
  void check_spellings(const BlockSpec& spec, const Json& obj, const std::string& path) {
    for (const KeySpec& k : spec.keys) {
      if (!k.alias.empty() && obj.contains(k.name) && obj.contains(k.alias)) {
        ctx_.error(path_join(path, k.alias),
                   fmt::format("given together with its alias {}", path_join(path, k.name)),
                   "keep one of them");
      }
      if (k.deprecated_by.empty() || !obj.contains(k.name)) continue;
      std::string old_path = path_join(path, k.name);
      if (k.deprecated_by == "-") {
        ctx_.warning(old_path, "deprecated and ignored", std::string(k.note));
        continue;
      }
      const KeySpec* successor = find_key(spec, k.deprecated_by);
      bool both =
          obj.contains(k.deprecated_by) ||
          (successor != nullptr && !successor->alias.empty() && obj.contains(successor->alias));
      std::string new_path = path_join(path, k.deprecated_by);
      if (both) {
        ctx_.error(old_path,
                   fmt::format("deprecated key given together with its successor {}", new_path),
                   fmt::format("remove {}", old_path));
      } else {
        ctx_.warning(old_path, fmt::format("deprecated; read as {}", new_path),
                     fmt::format("rename it to {}", new_path));
      }
    }
  }

  Context& ctx_;
  KeyIndex index_;
};

// Boolean keys given as strings ("enabled": "false"), replaced by booleans
// (coerce_string_booleans).
void coerce_block(const BlockSpec& spec, Json& obj, const std::string& path,
                  std::vector<CoercedBoolean>& replaced) {
  for (auto& [key, value] : obj.items()) {
    const KeySpec* k = find_key(spec, key);
    if (k == nullptr) continue;
    std::string key_path = path_join(path, key);
    if (k->kind == Kind::kBool && value.is_string()) {
      if (auto b = pydantic_bool(value.get_ref<const std::string&>())) {
        replaced.push_back({std::move(key_path), value.get<std::string>(), *b});
        value = *b;
      }
    } else if (k->kind == Kind::kBlock && k->block != nullptr && value.is_object()) {
      coerce_block(*k->block, value, key_path, replaced);
    }
  }
  // optimizer.params / scheduler.params: the keys of the named type.
  if (path == "optimizer" || path == "scheduler") {
    auto type = obj.find("type");
    auto params = obj.find("params");
    if (type == obj.end() || !type->is_string() || params == obj.end() || !params->is_object()) {
      return;
    }
    const TypeSpec* t = find_type(path == "optimizer" ? optimizer_types() : scheduler_types(),
                                  type->get_ref<const std::string&>());
    if (t != nullptr && t->params != nullptr) {
      coerce_block(*t->params, *params, path_join(path, "params"), replaced);
    }
  }
}

}  // namespace

std::optional<bool> pydantic_bool(std::string_view text) {
  if (text == "0" || iequals(text, "f") || iequals(text, "n") || iequals(text, "no") ||
      iequals(text, "off") || iequals(text, "false")) {
    return false;
  }
  if (text == "1" || iequals(text, "t") || iequals(text, "y") || iequals(text, "on") ||
      iequals(text, "yes") || iequals(text, "true")) {
    return true;
  }
  return std::nullopt;
}

std::vector<CoercedBoolean> coerce_string_booleans(Json& config) {
  std::vector<CoercedBoolean> replaced;
  if (config.is_object()) coerce_block(root_schema(), config, "", replaced);
  return replaced;
}

std::string Context::quote(const std::string& path, const Json& v) const {
  if (sources != nullptr) {
    if (auto it = sources->find(path); it != sources->end() && !it->second.raw.empty()) {
      return it->second.raw;
    }
  }
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

void Context::error(std::string path, std::string message, std::string hint) {
  report.diagnostics.push_back(
      {Severity::kError, std::move(path), std::move(message), std::move(hint)});
}
void Context::warning(std::string path, std::string message, std::string hint) {
  report.diagnostics.push_back(
      {Severity::kWarning, std::move(path), std::move(message), std::move(hint)});
}

void check_key_value(Context& ctx, const KeySpec& k, const Json& v, const std::string& path) {
  Walker(ctx).check_value(k, v, path);
}

void check_block(Context& ctx, const BlockSpec& spec, const Json& obj, const std::string& path) {
  Walker(ctx).check_block(spec, obj, path);
}

int ValidationReport::error_count() const {
  return static_cast<int>(
      std::count_if(diagnostics.begin(), diagnostics.end(),
                    [](const Diagnostic& d) { return d.severity == Severity::kError; }));
}
int ValidationReport::warning_count() const {
  return static_cast<int>(diagnostics.size()) - error_count();
}

std::string format_diagnostic(const Diagnostic& d) {
  std::string line = fmt::format("{}: {}: {}", d.severity == Severity::kError ? "error" : "warning",
                                 d.path, d.message);
  if (!d.hint.empty()) line += fmt::format(" ({})", d.hint);
  return line;
}

std::string ValidationReport::format() const {
  std::string out;
  for (const Diagnostic& d : diagnostics) out += format_diagnostic(d) + "\n";
  return out;
}

ValidationReport validate_ds_config(const Json& config, const ValidateOptions& options,
                                    const SourceMap* sources) {
  Context ctx;
  ctx.sources = sources;
  if (!config.is_object()) {
    ctx.error(std::string(kRootPath), "a DeepSpeed config must be a JSON object");
    return std::move(ctx.report);
  }
  // "enabled": "false" and the like are booleans, as in DeepSpeed (pydantic). Documents from the
  // loader have them replaced already (the schema walk warns, seeing the quoted source text).
  Json coerced = config;
  for (const CoercedBoolean& c : coerce_string_booleans(coerced)) {
    if (written_as_string(sources, c.path)) continue;  // the schema walk warns about it
    warn_string_boolean(ctx, c.path, Json(c.written).dump(), c.value);
  }
  // The legacy boolean form of zero_optimization is checked by the rules, not the schema walk.
  Json walked = coerced;
  if (walked.contains("zero_optimization") && walked["zero_optimization"].is_boolean()) {
    walked.erase("zero_optimization");
  }
  check_block(ctx, root_schema(), walked, "");
  check_rules(ctx, coerced, options);
  if (options.strict) {
    for (Diagnostic& d : ctx.report.diagnostics) {
      if (d.severity == Severity::kWarning) {
        d.severity = Severity::kError;
        d.message += " [--strict]";
      }
    }
  }
  return std::move(ctx.report);
}

}  // namespace zero::config
