// DeepSpeed ZeRO 1-3 checkpoints: model states + one optimizer-state file per data-parallel rank,
// merged into unpartitioned per-parameter fp32 tensors (the layout zero_to_fp32.py reads).
#include "checkpoint/deepspeed_state.h"

#include <algorithm>
#include <cctype>

#include "checkpoint/deepspeed_dir.h"
#include "checkpoint/torch_archive.h"

namespace zero::checkpoint {
namespace {

using json = nlohmann::json;

std::string join(const std::string& a, const std::string& b) {
  return a.empty() || a.back() == '/' ? a + b : a + "/" + b;
}

// Plain values (ds_config, scheduler state, loss scaler attributes) as JSON; tensors and other
// objects become null. Bounded in depth and in values visited: the pickle may nest, share (a DAG
// of n values can unfold to 2^n) or cycle.
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

json to_json(const PyValue& v) {
  int64_t budget = 1'000'000;  // a ds_config has hundreds of values
  return to_json(v, 0, budget);
}

// A required key of a dict, with a message naming the file and the key path.
StatusOr<const PyValue*> need(const PyValue& d, std::string_view key, PyKind kind,
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

// A scalar that may be an int, a float or a 0-d tensor (torch.optim's step is a tensor).
StatusOr<int64_t> scalar_step(const TorchArchive& a, const PyValue* v, const std::string& where) {
  if (!v) return data_loss("{}: no 'step' in the optimizer state", where);
  if (v->kind == PyKind::kInt) return v->i;
  if (v->kind == PyKind::kFloat) return static_cast<int64_t>(v->f);
  if (v->kind == PyKind::kTensor && v->tensor.numel() == 1) {
    std::vector<float> f;
    ZERO_RETURN_IF_ERROR(a.read_f32(v->tensor, f, where + ": step"));
    return static_cast<int64_t>(f[0]);
  }
  return data_loss("{}: 'step' is a {}", where, v->type_name());
}

// Our optimizer name for the ds_config's, or an error naming what cannot be carried over.
Status set_optimizer(const json& ds_config, DeepSpeedState& st, const std::string& where) {
  const json opt = ds_config.value("optimizer", json::object());
  std::string type = opt.value("type", std::string());
  std::transform(type.begin(), type.end(), type.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const json params = opt.value("params", json::object());
  if (type == "adamw") {
    st.optimizer_type = "adamw";
  } else if (type == "adam") {
    st.optimizer_type = params.value("adam_w_mode", true) ? "adamw" : "adam";
  } else if (type.empty()) {
    return invalid_argument(
        "{}: ds_config names no optimizer (a client optimizer was passed to deepspeed.initialize); "
        "its moments cannot be identified as Adam's, so they are not imported",
        where);
  } else {
    return invalid_argument("{}: the run used optimizer '{}'; only Adam / AdamW state is imported",
                            where, opt.value("type", type));
  }
  return ok_status();
}

Status read_model_states(Storage& storage, const std::string& path, DeepSpeedState& st,
                         std::vector<std::vector<std::pair<std::string, int64_t>>>& groups) {
  ZERO_ASSIGN_OR_RETURN(auto archive, TorchArchive::open(storage, path));
  const PyValue& root = archive->root();
  if (root.kind != PyKind::kDict) return data_loss("{}: not a dict", path);
  ZERO_ASSIGN_OR_RETURN(const PyValue* shapes, need(root, "param_shapes", PyKind::kList, path));
  for (const PyValue* group : shapes->items) {
    if (group->kind != PyKind::kDict)
      return data_loss("{}: param_shapes holds a {}", path, group->type_name());
    auto& names = groups.emplace_back();
    for (const auto& [k, v] : group->dict) {
      if (k->kind != PyKind::kString || !v->is_sequence())
        return data_loss("{}: malformed param_shapes", path);
      if (st.params.count(k->s)) return data_loss("{}: parameter '{}' listed twice", path, k->s);
      DeepSpeedParam& p = st.params[k->s];
      int64_t numel = 1;
      for (const PyValue* d : v->items) {
        if (d->kind != PyKind::kInt || d->i < 0 || d->i > (int64_t{1} << 40) ||
            (d->i > 0 && numel > (int64_t{1} << 40) / d->i)) {
          return data_loss("{}: parameter '{}' has a bad shape", path, k->s);
        }
        p.shape.push_back(d->i);
        numel *= d->i;
      }
      st.order.push_back(k->s);
      names.emplace_back(k->s, numel);
    }
  }
  st.global_steps = int_or(root.get("global_steps"), 0);
  st.global_samples = int_or(root.get("global_samples"), 0);
  st.skipped_steps = int_or(root.get("skipped_steps"), 0);
  st.world_size = static_cast<int>(int_or(root.get("dp_world_size"), 0));
  if (const PyValue* v = root.get("ds_version"); v && v->kind == PyKind::kString)
    st.ds_version = v->s;
  if (const PyValue* v = root.get("ds_config")) st.ds_config = to_json(*v);
  if (const PyValue* v = root.get("lr_scheduler")) st.lr_scheduler = to_json(*v);
  if (const PyValue* v = root.get("shared_params"); v && v->kind == PyKind::kDict) {
    for (const auto& [k, val] : v->dict)
      if (k->kind == PyKind::kString && val->kind == PyKind::kString)
        st.shared_params[k->s] = val->s;
  }
  if (st.world_size < 1 || st.world_size > 1 << 20) {
    return data_loss("{}: dp_world_size {} is not a world size", path, st.world_size);
  }
  if (!st.ds_config.is_object()) return data_loss("{}: no ds_config", path);
  return ok_status();
}

// ZeroStageEnum pickles by member name (getattr) or value; older versions wrote an int.
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

// One rank's flat partitions, appended per group to `flat` (master, exp_avg, exp_avg_sq).
struct Flat {
  std::vector<std::vector<float>> master, exp_avg, exp_avg_sq;  // stages 1/2: per group
  // Stage 3: per rank, that rank's groups concatenated (each parameter partitioned on its own).
  std::vector<std::vector<float>> rank_master, rank_exp_avg, rank_exp_avg_sq;
};

Status read_rank(Storage& storage, const std::string& path, int rank, DeepSpeedState& st,
                 Flat& flat) {
  ZERO_ASSIGN_OR_RETURN(auto archive, TorchArchive::open(storage, path));
  const PyValue& root = archive->root();
  ZERO_ASSIGN_OR_RETURN(const PyValue* osd,
                        need(root, "optimizer_state_dict", PyKind::kDict, path));
  const int stage = zero_stage_of(osd->get("zero_stage"));
  const bool z3 = stage == 3 || osd->get("fp32_flat_groups");
  if (stage != 1 && stage != 2 && stage != 3) return data_loss("{}: unknown zero_stage", path);
  st.stage = z3 ? 3 : stage;
  ZERO_ASSIGN_OR_RETURN(
      const PyValue* parts,
      need(*osd, z3 ? "fp32_flat_groups" : "single_partition_of_fp32_groups", PyKind::kList, path));
  ZERO_ASSIGN_OR_RETURN(
      const PyValue* base,
      need(*osd, z3 ? "optimizer_state_dict" : "base_optimizer_state", PyKind::kDict, path));
  const PyValue* states = base->get("state");
  ZERO_ASSIGN_OR_RETURN(const PyValue* groups, need(*base, "param_groups", PyKind::kList, path));
  if (!states || (!states->is_sequence() && states->kind != PyKind::kDict)) {
    return data_loss("{}: base_optimizer_state has no per-group state", path);
  }
  const size_t num_groups = parts->items.size();
  if (flat.master.empty()) {
    flat.master.resize(num_groups), flat.exp_avg.resize(num_groups),
        flat.exp_avg_sq.resize(num_groups);
  }
  if (flat.master.size() != num_groups || groups->items.size() != num_groups) {
    return data_loss("{}: {} partitions for {} param groups (rank 0 had {})", path, num_groups,
                     groups->items.size(), flat.master.size());
  }
  std::vector<float> buf;
  for (size_t g = 0; g < num_groups; ++g) {
    const std::string where = fmt::format("{}: group {}", path, g);
    const PyValue* s = nullptr;  // a list per group (stage 1/2) or torch's {index: state}
    if (states->kind == PyKind::kDict)
      s = states->get(static_cast<int64_t>(g));
    else if (g < states->items.size())
      s = states->items[g];
    if (!s || s->kind != PyKind::kDict) return data_loss("{}: no optimizer state", where);
    const PyValue* part = parts->items[g];
    const PyValue* m1 = s->get("exp_avg");
    const PyValue* m2 = s->get("exp_avg_sq");
    if (part->kind != PyKind::kTensor || !m1 || !m2 || m1->kind != PyKind::kTensor ||
        m2->kind != PyKind::kTensor) {
      return invalid_argument("{}: no exp_avg / exp_avg_sq tensors: not Adam's state", where);
    }
    // The fp32 partition is saved without the group's padding (the last rank's tail); the moments
    // may keep it (torch optimizers' state, DeepSpeed 0.14): their first n elements are the data.
    const int64_t n = part->tensor.numel();
    int64_t padding = 0;
    if (const PyValue* pads = osd->get("group_paddings"); pads && pads->is_sequence() &&
                                                          g < pads->items.size() &&
                                                          pads->items[g]->kind == PyKind::kInt) {
      padding = pads->items[g]->i;
    }
    for (const PyValue* m : {m1, m2}) {
      if (m->tensor.numel() != n && m->tensor.numel() != n + padding) {
        return data_loss("{}: partition of {} elements (padding {}) but moments of {} and {}",
                         where, n, padding, m1->tensor.numel(), m2->tensor.numel());
      }
    }
    auto append = [&](const PyValue* t, std::vector<float>& dst, const char* what) -> Status {
      ZERO_RETURN_IF_ERROR(archive->read_f32(t->tensor, buf, where + ": " + what));
      dst.insert(dst.end(), buf.begin(), buf.begin() + n);
      return ok_status();
    };
    const size_t r = static_cast<size_t>(rank);
    ZERO_RETURN_IF_ERROR(append(part, z3 ? flat.rank_master[r] : flat.master[g], "fp32 partition"));
    ZERO_RETURN_IF_ERROR(append(m1, z3 ? flat.rank_exp_avg[r] : flat.exp_avg[g], "exp_avg"));
    ZERO_RETURN_IF_ERROR(
        append(m2, z3 ? flat.rank_exp_avg_sq[r] : flat.exp_avg_sq[g], "exp_avg_sq"));
    ZERO_ASSIGN_OR_RETURN(int64_t step, scalar_step(*archive, s->get("step"), where));
    if (rank == 0 && g == 0) st.optimizer_step = step;
    if (step != st.optimizer_step)
      return data_loss("{}: step {} but rank 0 group 0 has {}", where, step, st.optimizer_step);
    const PyValue* betas = groups->items[g]->get("betas");
    if (betas && betas->is_sequence() && betas->items.size() == 2 && rank == 0 && g == 0) {
      auto num = [](const PyValue* v) {
        return v->kind == PyKind::kFloat ? v->f : static_cast<double>(v->i);
      };
      st.beta1 = num(betas->items[0]);
      st.beta2 = num(betas->items[1]);
    }
  }
  if (rank == 0) {
    if (const PyValue* ls = osd->get("loss_scaler")) st.loss_scaler = to_json(*ls);
    st.loss_scaler["dynamic"] = osd->get("dynamic_loss_scale") && osd->get("dynamic_loss_scale")->b;
  }
  return ok_status();
}

// Slices each group's merged flat vectors by param_shapes, as zero_to_fp32.py does: parameters
// are contiguous in group order; the tail is padding to a multiple of 2 * world_size.
Status split_groups(const std::vector<std::vector<std::pair<std::string, int64_t>>>& groups,
                    Flat& flat, DeepSpeedState& st) {
  if (groups.size() != flat.master.size()) {
    return data_loss("{}: param_shapes has {} groups, the optimizer {}", st.tag_dir, groups.size(),
                     flat.master.size());
  }
  const int64_t align = 2 * st.world_size;
  for (size_t g = 0; g < groups.size(); ++g) {
    const int64_t avail = static_cast<int64_t>(flat.master[g].size());
    int64_t offset = 0;
    for (const auto& [name, numel] : groups[g]) {
      if (numel > avail - offset) {
        return data_loss("{}: group {} holds {} elements, too few for its parameters (at '{}')",
                         st.tag_dir, g, avail, name);
      }
      DeepSpeedParam& p = st.params[name];
      const int64_t count = numel;  // a structured binding is not capturable before clang 16
      auto slice = [&](const std::vector<float>& src, std::vector<float>& dst) {
        dst.assign(src.begin() + offset, src.begin() + offset + count);
      };
      slice(flat.master[g], p.master);
      slice(flat.exp_avg[g], p.exp_avg);
      slice(flat.exp_avg_sq[g], p.exp_avg_sq);
      offset += numel;
    }
    auto aligned = [&](int64_t x) { return (x + align - 1) / align * align; };
    if (aligned(offset) != aligned(avail)) {
      return data_loss("{}: group {} holds {} elements but its parameters {} (more than padding)",
                       st.tag_dir, g, avail, offset);
    }
  }
  return ok_status();
}

// Stage 3, as zero_to_fp32.py reads it: parameters in param_shapes order, each partitioned on its
// own into ceil(numel / W) elements per rank (the last rank's tail is padding), laid end to end
// in every rank's concatenated groups.
Status split_partitioned(const std::vector<std::vector<std::pair<std::string, int64_t>>>& groups,
                         Flat& flat, DeepSpeedState& st) {
  const size_t world = static_cast<size_t>(st.world_size);
  const size_t avail = flat.rank_master[0].size();
  for (size_t r = 0; r < world; ++r) {
    if (flat.rank_master[r].size() != avail) {
      return data_loss("{}: rank {} holds {} fp32 elements, rank 0 {}", st.tag_dir, r,
                       flat.rank_master[r].size(), avail);
    }
  }
  size_t offset = 0;
  for (const auto& group : groups) {
    for (const auto& [name, numel] : group) {
      const size_t n = static_cast<size_t>(numel);
      const size_t part = (n + world - 1) / world;
      if (part > avail - offset) {
        return data_loss("{}: the partitions hold {} elements per rank, too few for '{}'",
                         st.tag_dir, avail, name);
      }
      DeepSpeedParam& p = st.params[name];
      auto gather = [&](const std::vector<std::vector<float>>& ranks, std::vector<float>& dst) {
        dst.clear();
        for (size_t r = 0; r < world; ++r) {
          const auto begin = ranks[r].begin() + static_cast<std::ptrdiff_t>(offset);
          dst.insert(dst.end(), begin, begin + static_cast<std::ptrdiff_t>(part));
        }
        dst.resize(n);
      };
      gather(flat.rank_master, p.master);
      gather(flat.rank_exp_avg, p.exp_avg);
      gather(flat.rank_exp_avg_sq, p.exp_avg_sq);
      offset += part;
    }
  }
  if (offset != avail) {
    return data_loss("{}: the parameters use {} of the {} elements per rank", st.tag_dir, offset,
                     avail);
  }
  return ok_status();
}

}  // namespace

StatusOr<DeepSpeedState> read_deepspeed_state(Storage& storage, const std::string& dir,
                                              const std::string& tag) {
  ZERO_ASSIGN_OR_RETURN(DeepSpeedCheckpoint ds, find_deepspeed_checkpoint(storage, dir, tag));
  if (!ds.found) return not_found("{}: not a DeepSpeed checkpoint directory", dir);
  DeepSpeedState st;
  st.tag_dir = ds.tag_dir;
  // Stages 1/2 write one model-state file; stage 3 one per rank (rank 0's has param_shapes).
  std::string model_file = join(ds.tag_dir, "mp_rank_00_model_states.pt");
  if (!storage.file_exists(model_file)) {
    model_file = join(ds.tag_dir, "zero_pp_rank_0_mp_rank_00_model_states.pt");
  }
  if (!storage.file_exists(model_file)) {
    return unimplemented(
        "{}: no mp_rank_00_model_states.pt nor zero_pp_rank_0_mp_rank_00_model_"
        "states.pt (a model- or pipeline-parallel checkpoint?); only data-parallel "
        "ZeRO checkpoints are imported",
        ds.tag_dir);
  }
  std::vector<std::vector<std::pair<std::string, int64_t>>> groups;
  ZERO_RETURN_IF_ERROR(read_model_states(storage, model_file, st, groups));
  ZERO_RETURN_IF_ERROR(set_optimizer(st.ds_config, st, model_file));
  const json& bf16 = st.ds_config.value("bf16", json::object());
  const json& fp16 = st.ds_config.value("fp16", json::object());
  if (bf16.is_object() && bf16.value("enabled", false)) st.model_dtype = "bf16";
  if (fp16.is_object() && fp16.value("enabled", false)) st.model_dtype = "f16";
  if (static_cast<size_t>(st.world_size) > ds.optim_files.size()) {
    return not_found("{}: saved by {} ranks but holds {} optimizer-state files", ds.tag_dir,
                     st.world_size, ds.optim_files.size());
  }
  Flat flat;
  flat.rank_master.resize(static_cast<size_t>(st.world_size));
  flat.rank_exp_avg.resize(static_cast<size_t>(st.world_size));
  flat.rank_exp_avg_sq.resize(static_cast<size_t>(st.world_size));
  for (int r = 0; r < st.world_size; ++r) {
    std::string path;
    for (const char* prefix : {"", "bf16_"}) {
      const std::string p =
          join(ds.tag_dir, fmt::format("{}zero_pp_rank_{}_mp_rank_00_optim_states.pt", prefix, r));
      if (storage.file_exists(p)) path = p;
    }
    if (path.empty()) {
      return not_found(
          "{}: no optimizer-state file of rank {} (zero_pp_rank_{}_mp_rank_00_"
          "optim_states.pt) of the {} that saved",
          ds.tag_dir, r, r, st.world_size);
    }
    ZERO_RETURN_IF_ERROR(read_rank(storage, path, r, st, flat));
  }
  ZERO_RETURN_IF_ERROR(st.stage == 3 ? split_partitioned(groups, flat, st)
                                     : split_groups(groups, flat, st));
  return st;
}

}  // namespace zero::checkpoint
