// DeepSpeed ZeRO 1-3 checkpoints: model states + one optimizer-state file per data-parallel rank,
// merged into unpartitioned per-parameter fp32 tensors (the layout zero_to_fp32.py reads). Each
// tensor of a rank file is scattered into the parameters as soon as it is read, so memory holds
// the merged state once plus one tensor (zero_to_fp32.py concatenates the partitions first).
#include "checkpoint/deepspeed_state.h"

#include <algorithm>
#include <cctype>

#include "checkpoint/deepspeed_dir.h"
#include "checkpoint/deepspeed_universal.h"
#include "checkpoint/deepspeed_values.h"
#include "checkpoint/torch_archive.h"

namespace zero::checkpoint {
namespace {

using json = nlohmann::json;

std::string join(const std::string& a, const std::string& b) {
  return a.empty() || a.back() == '/' ? a + b : a + "/" + b;
}

// One param group of param_shapes: (name, numel) in DeepSpeed's flattening order.
using ParamGroup = std::vector<std::pair<std::string, int64_t>>;

// The three per-parameter tensors, as the rank files' tensors of each group are read.
using Kind = std::vector<float> DeepSpeedParam::*;
constexpr Kind kKinds[3] = {&DeepSpeedParam::master, &DeepSpeedParam::exp_avg,
                            &DeepSpeedParam::exp_avg_sq};
constexpr const char* kKindNames[3] = {"fp32 partition", "exp_avg", "exp_avg_sq"};

// A run of one parameter's elements in a flat index space: one group's partitions end to end
// (stages 1/2) or one rank's groups end to end (stage 3).
struct Piece {
  DeepSpeedParam* param = nullptr;
  int64_t param_offset = 0;  // its first element in the parameter
  int64_t flat_begin = 0;
  int64_t count = 0;
};

// Copies `src`, elements [src_begin, src_begin + src.size()) of a flat space, into each piece of
// that space it overlaps.
void scatter(const std::vector<float>& src, int64_t src_begin, const std::vector<Piece>& pieces,
             Kind kind) {
  const int64_t src_end = src_begin + static_cast<int64_t>(src.size());
  for (const Piece& p : pieces) {
    const int64_t begin = std::max(src_begin, p.flat_begin);
    const int64_t end = std::min(src_end, p.flat_begin + p.count);
    if (begin >= end) continue;
    std::copy(src.begin() + (begin - src_begin), src.begin() + (end - src_begin),
              ((*p.param).*kind).begin() + p.param_offset + (begin - p.flat_begin));
  }
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

// param_shapes: the groups' parameters in flattening order, each allocated once in st.params.
Status read_param_shapes(const PyValue& root, const std::string& path, DeepSpeedState& st,
                         std::vector<ParamGroup>& groups) {
  if (const PyValue* shapes = root.get("param_shapes"); shapes && shapes->is_none()) {
    return unimplemented(
        "{}: saved without ZeRO (stage 0: param_shapes is None, the optimizer's state is torch's "
        "in this file); only ZeRO stage 1-3 checkpoints are imported (or convert the weights "
        "with zero_to_fp32.py / the module state and start from them with --model)",
        path);
  }
  ZERO_ASSIGN_OR_RETURN(const PyValue* shapes, need_key(root, "param_shapes", PyKind::kList, path));
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
  return ok_status();
}

Status read_model_states(Storage& storage, const std::string& path, DeepSpeedState& st,
                         std::vector<ParamGroup>& groups) {
  ZERO_ASSIGN_OR_RETURN(auto archive, TorchArchive::open(storage, path));
  const PyValue& root = archive->root();
  if (root.kind != PyKind::kDict) return data_loss("{}: not a dict", path);
  ZERO_RETURN_IF_ERROR(read_param_shapes(root, path, st, groups));
  st.global_steps = int_or(root.get("global_steps"), 0);
  st.global_samples = int_or(root.get("global_samples"), 0);
  st.skipped_steps = int_or(root.get("skipped_steps"), 0);
  st.world_size = static_cast<int>(int_or(root.get("dp_world_size"), 0));
  if (const PyValue* v = root.get("ds_version"); v && v->kind == PyKind::kString)
    st.ds_version = v->s;
  if (const PyValue* v = root.get("ds_config")) st.ds_config = py_to_json(*v);
  if (const PyValue* v = root.get("lr_scheduler")) st.lr_scheduler = py_to_json(*v);
  if (const PyValue* v = root.get("shared_params"); v && v->kind == PyKind::kDict) {
    for (const auto& [k, val] : v->dict)
      if (k->kind == PyKind::kString && val->kind == PyKind::kString)
        st.shared_params[k->s] = val->s;
  }
  if (st.world_size < 1 || st.world_size > 1 << 20) {
    return data_loss("{}: dp_world_size {} is not a world size", path, st.world_size);
  }
  if (const int64_t mp = int_or(root.get("mp_world_size"), 1); mp != 1) {
    return unimplemented(
        "{}: saved with model (tensor) parallelism, mp_world_size {}; only "
        "data-parallel ZeRO checkpoints are imported",
        path, mp);
  }
  if (!st.ds_config.is_object()) return data_loss("{}: no ds_config", path);
  return ok_status();
}

// Where each parameter's elements sit in the rank files' flat tensors.
struct Merge {
  std::vector<ParamGroup> groups;
  // Stages 1/2: per group, the pieces of its flat space (param_alignment_paddings between
  // parameters, DeepSpeed >= 0.18), the elements it needs and those the ranks read so far held.
  std::vector<std::vector<Piece>> group_pieces;
  std::vector<int64_t> group_needed, group_filled;
  int64_t stage3_per_rank = 0;  // stage 3: the elements each rank's groups hold together
};

// Stages 1/2 (rank 0's file, which names the alignment paddings): the groups' flat spaces.
Status plan_groups(const PyValue& osd, const std::string& path, DeepSpeedState& st, Merge& m) {
  const PyValue* paddings = osd.get("param_alignment_paddings");
  for (size_t g = 0; g < m.groups.size(); ++g) {
    const PyValue* pads = paddings && paddings->is_sequence() && g < paddings->items.size()
                              ? paddings->items[g]
                              : nullptr;
    if (pads && (!pads->is_sequence() || pads->items.size() != m.groups[g].size())) {
      return data_loss("{}: param_alignment_paddings of group {} does not list its {} parameters",
                       path, g, m.groups[g].size());
    }
    auto& pieces = m.group_pieces.emplace_back();
    int64_t offset = 0;
    for (size_t i = 0; i < m.groups[g].size(); ++i) {
      const auto& [name, numel] = m.groups[g][i];
      pieces.push_back({&st.params[name], 0, offset, numel});
      offset += numel;
      if (pads) {
        const int64_t pad = int_or(pads->items[i], -1);
        if (pad < 0 || pad > 64) return data_loss("{}: bad alignment padding of '{}'", path, name);
        offset += pad;
      }
    }
    m.group_needed.push_back(offset);
    m.group_filled.push_back(0);
  }
  return ok_status();
}

// Stage 3, as zero_to_fp32.py reads it: each parameter partitioned on its own into
// ceil(numel / W) elements per rank (the last rank's tail is padding), laid end to end in
// param_shapes order over the rank's groups.
std::vector<Piece> rank_pieces(DeepSpeedState& st, Merge& m, int rank) {
  std::vector<Piece> pieces;
  const int64_t world = st.world_size;
  int64_t flat = 0;
  for (const ParamGroup& group : m.groups) {
    for (const auto& [name, numel] : group) {
      const int64_t part = (numel + world - 1) / world;
      const int64_t first = part * rank;
      const int64_t count = std::max<int64_t>(0, std::min(part, numel - first));
      if (count > 0) pieces.push_back({&st.params[name], first, flat, count});
      flat += part;
    }
  }
  m.stage3_per_rank = flat;
  return pieces;
}

// The per-group optimizer state of `osd`: a list per group (stages 1/2) or torch's {index: state}.
const PyValue* group_state(const PyValue& states, size_t g) {
  if (states.kind == PyKind::kDict) return states.get(static_cast<int64_t>(g));
  return g < states.items.size() ? states.items[g] : nullptr;
}

// Adam's step of group g: in its state (torch), in its param group, or beside the base state
// (DeepSpeed's elastic checkpoints).
StatusOr<int64_t> group_step(const TorchArchive& a, const PyValue& osd, const PyValue& state,
                             const PyValue& param_group, const std::string& where) {
  const PyValue* step = state.get("step");
  if (!step) step = param_group.get("step");
  if (!step) step = osd.get("base_optimizer_state_step");
  return py_step(a, step, where);
}

// The stage (1-3) and layout of one rank's optimizer_state_dict.
StatusOr<std::pair<int, std::string>> saved_layout(const PyValue& osd, const std::string& path) {
  const int stage = zero_stage_of(osd.get("zero_stage"));
  if (stage == 3 || osd.get("fp32_flat_groups")) return std::make_pair(3, std::string("zero"));
  if (stage == 1 || stage == 2) return std::make_pair(stage, std::string("zero"));
  if (!osd.get("zero_stage") && osd.get("single_partition_of_fp32_groups")) {
    // BF16_Optimizer: ZeRO-1 partitioning without a zero_stage key (its ds_config says 0 or 1).
    return std::make_pair(1, std::string("bf16_optimizer"));
  }
  return data_loss("{}: unknown zero_stage", path);
}

// One rank file's optimizer state as read_rank found it.
struct RankState {
  const TorchArchive& archive;
  const PyValue& osd;
  const PyValue& parts;   // the fp32 partition of each group
  const PyValue& states;  // the base optimizer's per-group state
  const PyValue& groups;  // the base optimizer's param_groups
  const std::string& path;
  int rank;
};

// group_paddings[g]: the padding at the end of group g's partition on this rank (0 if absent).
int64_t group_padding(const PyValue& osd, size_t g) {
  const PyValue* pads = osd.get("group_paddings");
  return pads && pads->is_sequence() && g < pads->items.size() ? int_or(pads->items[g], 0) : 0;
}

// Group g of one rank: its fp32 partition and moments scattered from `flat_begin` of `pieces`'
// flat space; step and betas checked against rank 0's. *numel: the partition's elements.
Status read_group(const RankState& rs, size_t g, int64_t flat_begin,
                  const std::vector<Piece>& pieces, DeepSpeedState& st, int64_t* numel) {
  const std::string where = fmt::format("{}: group {}", rs.path, g);
  const PyValue* s = group_state(rs.states, g);
  if (!s || s->kind != PyKind::kDict) return data_loss("{}: no optimizer state", where);
  const PyValue* tensors[3] = {rs.parts.items[g], s->get("exp_avg"), s->get("exp_avg_sq")};
  for (const PyValue* t : tensors) {
    if (!t || t->kind != PyKind::kTensor)
      return invalid_argument("{}: no exp_avg / exp_avg_sq tensors: not Adam's state", where);
  }
  // Stage 1/2 partitions are saved without the group's padding (the last rank's tail); the
  // moments may keep it (torch optimizers' state): their first n elements are the data.
  const int64_t n = tensors[0]->tensor.numel();
  const int64_t padding = group_padding(rs.osd, g);
  for (int k = 1; k < 3; ++k) {
    const int64_t got = tensors[k]->tensor.numel();
    if (got != n && got != n + padding) {
      return data_loss("{}: partition of {} elements (padding {}) but {} of {}", where, n, padding,
                       kKindNames[k], got);
    }
  }
  std::vector<float> buf;
  for (int k = 0; k < 3; ++k) {
    ZERO_RETURN_IF_ERROR(
        rs.archive.read_f32(tensors[k]->tensor, buf, where + ": " + kKindNames[k]));
    buf.resize(static_cast<size_t>(n));
    scatter(buf, flat_begin, pieces, kKinds[k]);
  }
  *numel = n;
  const PyValue& param_group = *rs.groups.items[g];
  ZERO_ASSIGN_OR_RETURN(int64_t step, group_step(rs.archive, rs.osd, *s, param_group, where));
  if (rs.rank == 0 && g == 0) st.optimizer_step = step;
  if (step != st.optimizer_step)
    return data_loss("{}: step {} but rank 0 group 0 has {}", where, step, st.optimizer_step);
  const PyValue* betas = param_group.get("betas");
  if (betas && betas->is_sequence() && betas->items.size() == 2 && rs.rank == 0 && g == 0) {
    st.beta1 = py_number(*betas->items[0]);
    st.beta2 = py_number(*betas->items[1]);
  }
  return ok_status();
}

Status read_rank(Storage& storage, const std::string& path, int rank, DeepSpeedState& st,
                 Merge& m) {
  ZERO_ASSIGN_OR_RETURN(auto archive, TorchArchive::open(storage, path));
  ZERO_ASSIGN_OR_RETURN(const PyValue* osd,
                        need_key(archive->root(), "optimizer_state_dict", PyKind::kDict, path));
  ZERO_ASSIGN_OR_RETURN(auto layout, saved_layout(*osd, path));
  if (rank == 0) {
    st.stage = layout.first;
    st.layout = layout.second;
    if (st.stage != 3) ZERO_RETURN_IF_ERROR(plan_groups(*osd, path, st, m));
  } else if (layout.first != st.stage || layout.second != st.layout) {
    return data_loss("{}: saved at ZeRO stage {} ({}), rank 0 at {} ({})", path, layout.first,
                     layout.second, st.stage, st.layout);
  }
  const bool z3 = st.stage == 3;
  ZERO_ASSIGN_OR_RETURN(const PyValue* parts,
                        need_key(*osd, z3 ? "fp32_flat_groups" : "single_partition_of_fp32_groups",
                                 PyKind::kList, path));
  ZERO_ASSIGN_OR_RETURN(
      const PyValue* base,
      need_key(*osd, z3 ? "optimizer_state_dict" : "base_optimizer_state", PyKind::kDict, path));
  const PyValue* states = base->get("state");
  ZERO_ASSIGN_OR_RETURN(const PyValue* groups,
                        need_key(*base, "param_groups", PyKind::kList, path));
  if (!states || (!states->is_sequence() && states->kind != PyKind::kDict)) {
    return data_loss("{}: base_optimizer_state has no per-group state", path);
  }
  const size_t num_groups = parts->items.size();
  if (groups->items.size() != num_groups || (!z3 && num_groups != m.groups.size())) {
    return data_loss("{}: {} partitions for {} param groups (param_shapes has {})", path,
                     num_groups, groups->items.size(), m.groups.size());
  }
  const RankState rs{*archive, *osd, *parts, *states, *groups, path, rank};
  const std::vector<Piece> stage3_pieces = z3 ? rank_pieces(st, m, rank) : std::vector<Piece>{};
  int64_t stage3_flat = 0;  // where group g starts in this rank's stage-3 flat space
  for (size_t g = 0; g < num_groups; ++g) {
    int64_t n = 0;
    if (z3) {
      ZERO_RETURN_IF_ERROR(read_group(rs, g, stage3_flat, stage3_pieces, st, &n));
      stage3_flat += n;
    } else {
      ZERO_RETURN_IF_ERROR(read_group(rs, g, m.group_filled[g], m.group_pieces[g], st, &n));
      m.group_filled[g] += n;
    }
  }
  if (z3 && stage3_flat != m.stage3_per_rank) {
    return data_loss("{}: holds {} fp32 elements; the parameters' partitions take {} per rank",
                     path, stage3_flat, m.stage3_per_rank);
  }
  if (rank == 0) {
    if (const PyValue* ls = osd->get("loss_scaler")) st.loss_scaler = py_to_json(*ls);
    const PyValue* dynamic = osd->get("dynamic_loss_scale");
    st.loss_scaler["dynamic"] = dynamic && dynamic->kind == PyKind::kBool && dynamic->b;
  }
  return ok_status();
}

// Stages 1/2, after every rank: each group's partitions hold its parameters and at most the
// padding to a multiple of 2 * world_size (zero_to_fp32.py's check).
Status check_groups(const Merge& m, const DeepSpeedState& st) {
  const int64_t align = 2 * st.world_size;
  auto aligned = [&](int64_t x) { return (x + align - 1) / align * align; };
  for (size_t g = 0; g < m.groups.size(); ++g) {
    const int64_t avail = m.group_filled[g];
    for (const Piece& p : m.group_pieces[g]) {
      if (p.flat_begin + p.count > avail) {
        std::string name;
        for (const auto& [n, param] : st.params)
          if (&param == p.param) name = n;
        return data_loss("{}: group {} holds {} elements, too few for its parameters (at '{}')",
                         st.tag_dir, g, avail, name);
      }
    }
    if (aligned(m.group_needed[g]) != aligned(avail)) {
      return data_loss("{}: group {} holds {} elements but its parameters {} (more than padding)",
                       st.tag_dir, g, avail, m.group_needed[g]);
    }
  }
  return ok_status();
}

// Stages 1/2 write one model-state file; stage 3 one per rank (rank 0's has param_shapes).
StatusOr<std::string> model_states_file(Storage& storage, const std::string& tag_dir) {
  for (const char* name :
       {"mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt",
        "bf16_zero_pp_rank_0_mp_rank_00_model_states.pt"}) {
    if (storage.file_exists(join(tag_dir, name))) return join(tag_dir, name);
  }
  return unimplemented(
      "{}: no mp_rank_00_model_states.pt nor zero_pp_rank_0_mp_rank_00_model_"
      "states.pt (a model- or pipeline-parallel checkpoint?); only data-parallel "
      "ZeRO checkpoints are imported",
      tag_dir);
}

// Sizes every parameter's three tensors, once param_shapes' claims are bounded by the files: each
// element takes at least 2 bytes in each of the three tensors some rank file holds.
Status allocate_params(Storage& storage, const DeepSpeedCheckpoint& ds, const Merge& m,
                       DeepSpeedState& st) {
  uint64_t file_bytes = 0;
  for (const std::string& name : ds.optim_files) {
    ZERO_ASSIGN_OR_RETURN(uint64_t bytes, storage.file_size(join(ds.tag_dir, name)));
    file_bytes += bytes;
  }
  uint64_t numel = 0;
  for (const ParamGroup& group : m.groups)
    for (const auto& [name, n] : group) numel += static_cast<uint64_t>(n);
  if (numel > file_bytes / 6) {
    return data_loss(
        "{}: param_shapes names {} elements but the optimizer-state files hold {} bytes",
        ds.tag_dir, numel, file_bytes);
  }
  for (const ParamGroup& group : m.groups) {
    for (const auto& [name, n] : group) {
      DeepSpeedParam& p = st.params[name];
      for (Kind k : kKinds) (p.*k).assign(static_cast<size_t>(n), 0.f);
    }
  }
  return ok_status();
}

Status read_rank_files(Storage& storage, const DeepSpeedCheckpoint& ds, DeepSpeedState& st,
                       Merge& m) {
  if (static_cast<size_t>(st.world_size) > ds.optim_files.size()) {
    return not_found("{}: saved by {} ranks but holds {} optimizer-state files", ds.tag_dir,
                     st.world_size, ds.optim_files.size());
  }
  ZERO_RETURN_IF_ERROR(allocate_params(storage, ds, m, st));
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
    ZERO_RETURN_IF_ERROR(read_rank(storage, path, r, st, m));
  }
  return st.stage == 3 ? ok_status() : check_groups(m, st);
}

}  // namespace

StatusOr<DeepSpeedState> read_deepspeed_state(Storage& storage, const std::string& dir,
                                              const std::string& tag) {
  ZERO_ASSIGN_OR_RETURN(DeepSpeedCheckpoint ds, find_deepspeed_checkpoint(storage, dir, tag));
  if (!ds.found) return not_found("{}: not a DeepSpeed checkpoint directory", dir);
  DeepSpeedState st;
  st.tag_dir = ds.tag_dir;
  ZERO_ASSIGN_OR_RETURN(const std::string model_file, model_states_file(storage, ds.tag_dir));
  Merge m;
  ZERO_RETURN_IF_ERROR(read_model_states(storage, model_file, st, m.groups));
  ZERO_RETURN_IF_ERROR(set_optimizer(st.ds_config, st, model_file));
  const json& bf16 = st.ds_config.value("bf16", json::object());
  const json& fp16 = st.ds_config.value("fp16", json::object());
  if (bf16.is_object() && bf16.value("enabled", false)) st.model_dtype = "bf16";
  if (fp16.is_object() && fp16.value("enabled", false)) st.model_dtype = "f16";
  if (ds.optim_files.empty() && is_universal_checkpoint(storage, ds.tag_dir)) {
    st.layout = "universal";
    ZERO_RETURN_IF_ERROR(read_universal_params(storage, ds.tag_dir, st));
    return st;
  }
  ZERO_RETURN_IF_ERROR(read_rank_files(storage, ds, st, m));
  return st;
}

}  // namespace zero::checkpoint
