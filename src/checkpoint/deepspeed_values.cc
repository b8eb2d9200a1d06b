// DeepSpeed's pickled values read with messages (deepspeed_values.h).
#include "checkpoint/deepspeed_values.h"

namespace zero::checkpoint {
namespace {

using json = nlohmann::json;

json to_json(const PyValue& v, int depth, int64_t& budget) {
  if (depth > 32 || --budget < 0) return nullptr;
  switch (v.kind) {
    case PyKind::kBool: return v.b;
    case PyKind::kInt: return v.i;
    case PyKind::kFloat: return v.f;
    case PyKind::kString: return v.s;
    case PyKind::kTuple:
    case PyKind::kList: {
      json a = json::array();
      for (const PyValue* item : v.items) a.push_back(to_json(*item, depth + 1, budget));
      return a;
    }
    case PyKind::kDict:
    case PyKind::kObject: {
      json o = json::object();
      for (const auto& [k, val] : v.dict) {
        if (k->kind == PyKind::kString) o[k->s] = to_json(*val, depth + 1, budget);
        if (k->kind == PyKind::kInt) o[std::to_string(k->i)] = to_json(*val, depth + 1, budget);
      }
      return o;
    }
    default: return nullptr;
  }
}

}  // namespace

json py_to_json(const PyValue& v) {
  int64_t budget = 1'000'000;  // a ds_config has hundreds of values; a shared DAG unfolds to 2^n
  return to_json(v, 0, budget);
}

StatusOr<const PyValue*> need_key(const PyValue& d, std::string_view key, PyKind kind,
                                  const std::string& where) {
  const PyValue* v = d.get(key);
  if (!v)
    return data_loss("{}: no '{}' (not a DeepSpeed checkpoint of a known version?)", where, key);
  const bool ok = v->kind == kind || (kind == PyKind::kList && v->kind == PyKind::kTuple);
  if (!ok) {
    PyValue expected;
    expected.kind = kind;
    return data_loss("{}: '{}' is a {}, expected a {}", where, key, v->type_name(),
                     expected.type_name());
  }
  return v;
}

int64_t int_or(const PyValue* v, int64_t fallback) {
  return v && v->kind == PyKind::kInt ? v->i : fallback;
}

StatusOr<int64_t> py_step(const TorchArchive& archive, const PyValue* v, const std::string& where) {
  if (!v) return data_loss("{}: no 'step' in the optimizer state", where);
  if (v->kind == PyKind::kInt) return v->i;
  if (v->kind == PyKind::kFloat) return static_cast<int64_t>(v->f);
  if (v->kind == PyKind::kTensor && v->tensor.numel() == 1) {
    std::vector<float> f;
    ZERO_RETURN_IF_ERROR(archive.read_f32(v->tensor, f, where + ": step"));
    return static_cast<int64_t>(f[0]);
  }
  return data_loss("{}: 'step' is a {}", where, v->type_name());
}

int zero_stage_of(const PyValue* v) {
  if (!v) return -1;
  if (v->kind == PyKind::kInt) return static_cast<int>(v->i);
  if (const PyValue* value = v->get("value"); value && value->kind == PyKind::kInt)
    return static_cast<int>(value->i);
  if (const PyValue* name = v->get("name"); name && name->kind == PyKind::kString) {
    const char* kNames[] = {"disabled", "optimizer_states", "gradients", "weights"};
    for (int s = 0; s < 4; ++s)
      if (name->s == kNames[s]) return s;
  }
  return -1;
}

double py_number(const PyValue& v) {
  return v.kind == PyKind::kFloat ? v.f : static_cast<double>(v.i);
}

}  // namespace zero::checkpoint
