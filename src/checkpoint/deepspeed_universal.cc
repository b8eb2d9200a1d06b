// DeepSpeed universal checkpoints read per parameter (deepspeed_universal.h).
#include "checkpoint/deepspeed_universal.h"

#include "checkpoint/deepspeed_values.h"
#include "checkpoint/torch_archive.h"

namespace zero::checkpoint {
namespace {

std::string zero_dir(const std::string& tag_dir) {
  return tag_dir.empty() || tag_dir.back() == '/' ? tag_dir + "zero" : tag_dir + "/zero";
}

// A parameter name used as a directory name: one path component, nothing that climbs.
bool safe_component(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// The tensor of one state file: torch.save(tensor) (stage 3) or {"param": tensor, ...}.
StatusOr<const PyValue*> state_tensor(const TorchArchive& a) {
  const PyValue* t = &a.root();
  if (t->kind == PyKind::kDict) t = t->get("param");
  if (!t || t->kind != PyKind::kTensor)
    return data_loss("{}: neither a tensor nor a dict with a 'param' tensor", a.path());
  return t;
}

Status read_param(Storage& storage, const std::string& dir, DeepSpeedParam& p, int64_t* step) {
  int64_t numel = 1;
  for (int64_t d : p.shape) numel *= d;
  std::vector<float>* dst[3] = {&p.master, &p.exp_avg, &p.exp_avg_sq};
  const char* files[3] = {"fp32.pt", "exp_avg.pt", "exp_avg_sq.pt"};
  std::vector<std::unique_ptr<TorchArchive>> archives;
  std::vector<const PyValue*> tensors;
  for (const char* file : files) {  // every file checked before anything is allocated
    const std::string path = dir + "/" + file;
    if (!storage.file_exists(path)) {
      return not_found(
          "{}: missing (ds_to_universal writes fp32, exp_avg and exp_avg_sq of every "
          "parameter the optimizer holds)",
          path);
    }
    ZERO_ASSIGN_OR_RETURN(auto archive, TorchArchive::open(storage, path));
    ZERO_ASSIGN_OR_RETURN(const PyValue* t, state_tensor(*archive));
    if (t->tensor.numel() != numel) {
      return data_loss("{}: {} elements, but the model states give the parameter {}", path,
                       t->tensor.numel(), numel);
    }
    tensors.push_back(t);
    archives.push_back(std::move(archive));
  }
  for (size_t k = 0; k < 3; ++k)
    ZERO_RETURN_IF_ERROR(archives[k]->read_f32(tensors[k]->tensor, *dst[k], archives[k]->path()));
  const std::string step_path = dir + "/step.pt";
  if (!storage.file_exists(step_path)) return not_found("{}: missing", step_path);
  ZERO_ASSIGN_OR_RETURN(auto archive, TorchArchive::open(storage, step_path));
  ZERO_ASSIGN_OR_RETURN(*step, py_step(*archive, &archive->root(), step_path));
  return ok_status();
}

// zero/optimizer_state.pt: what ds_to_universal keeps of rank 0's optimizer state.
Status read_optimizer_state(Storage& storage, const std::string& path, DeepSpeedState& st) {
  ZERO_ASSIGN_OR_RETURN(auto archive, TorchArchive::open(storage, path));
  const PyValue& root = archive->root();
  if (root.kind != PyKind::kDict) return data_loss("{}: not a dict", path);
  ZERO_ASSIGN_OR_RETURN(const PyValue* groups, need_key(root, "param_groups", PyKind::kList, path));
  if (!groups->items.empty()) {
    const PyValue* betas = groups->items[0]->get("betas");
    if (betas && betas->is_sequence() && betas->items.size() == 2) {
      st.beta1 = py_number(*betas->items[0]);
      st.beta2 = py_number(*betas->items[1]);
    }
  }
  if (const PyValue* ls = root.get("loss_scaler")) st.loss_scaler = py_to_json(*ls);
  const PyValue* dynamic = root.get("dynamic_loss_scale");
  st.loss_scaler["dynamic"] = dynamic && dynamic->kind == PyKind::kBool && dynamic->b;
  st.stage = zero_stage_of(root.get("zero_stage"));
  if (st.stage < 1 || st.stage > 3) {
    // BF16_Optimizer's state has no zero_stage: the ds_config's (ZeRO-1 partitioning).
    st.stage = st.ds_config.value("zero_optimization", nlohmann::json::object()).value("stage", 1);
    if (st.stage < 1 || st.stage > 3) st.stage = 1;
  }
  return ok_status();
}

}  // namespace

bool is_universal_checkpoint(Storage& storage, const std::string& tag_dir) {
  return storage.file_exists(zero_dir(tag_dir) + "/optimizer_state.pt");
}

Status read_universal_params(Storage& storage, const std::string& tag_dir, DeepSpeedState& st) {
  const std::string zero = zero_dir(tag_dir);
  ZERO_RETURN_IF_ERROR(read_optimizer_state(storage, zero + "/optimizer_state.pt", st));
  bool first = true;
  for (const std::string& name : st.order) {
    if (!safe_component(name))
      return data_loss("{}: parameter name '{}' is not a directory name", tag_dir, name);
    int64_t step = 0;
    ZERO_RETURN_IF_ERROR(read_param(storage, zero + "/" + name, st.params[name], &step));
    if (first) st.optimizer_step = step;
    if (step != st.optimizer_step) {
      return data_loss("{}/{}/step.pt: step {}, but {} has {}", zero, name, step, st.order.front(),
                       st.optimizer_step);
    }
    first = false;
  }
  return ok_status();
}

}  // namespace zero::checkpoint
