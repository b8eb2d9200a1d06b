// DeepSpeed checkpoint -> ZeRO.cpp checkpoint: parameters by HF name into our units.
#include "checkpoint/deepspeed_import.h"

#include <set>

#include <fmt/ranges.h>

#include "checkpoint/checkpoint.h"
#include "comm/self_communicator.h"
#include "model/param_layout.h"
#include "sharding/shard_layout.h"

namespace zero::checkpoint {
namespace {

using json = nlohmann::json;

// DeepSpeed's (HF-layout) shape of our parameter `spec`, checked against what it saved.
Status check_shape(const model::ParamSpec& spec, const DeepSpeedParam& p) {
  std::vector<int64_t> want;
  for (int d = 0; d < spec.shape.rank(); ++d) want.push_back(spec.shape[d]);
  if (spec.hf_transposed && want.size() == 2) std::swap(want[0], want[1]);
  if (p.shape != want) {
    return invalid_argument("parameter '{}': DeepSpeed holds shape [{}], this model [{}]",
                            spec.name, fmt::join(p.shape, ", "), fmt::join(want, ", "));
  }
  return ok_status();
}

// Copies one of DeepSpeed's (HF-layout) tensors of `spec` into a unit-flat buffer at its offset,
// transposing GPT-2's Conv1D weights into our (out, in).
void place(const model::ParamSpec& spec, const std::vector<float>& src, float* unit_flat) {
  float* out = unit_flat + spec.offset;
  if (!spec.hf_transposed) {
    std::copy(src.begin(), src.begin() + spec.numel(), out);
    return;
  }
  const int64_t rows = spec.shape[0],
                cols = spec.shape[1];  // ours (out, in); DeepSpeed's (in, out)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = src[static_cast<size_t>(c * rows + r)];
}

// Unit u's padded flat buffer of one kind (master / exp_avg / exp_avg_sq), filled when the writer
// asks for it: the import holds DeepSpeed's state once and one unit's tensor at a time.
UnitPartition streamed_unit(const model::ModelLayout& layout, int u, int64_t padded,
                            const DeepSpeedState& st) {
  UnitPartition part{0, padded, nullptr, nullptr, nullptr, nullptr};
  part.read = [&layout, &st, u, padded](float* master, float* exp_avg, float* exp_avg_sq) {
    const std::pair<float*, std::vector<float> DeepSpeedParam::*> kinds[3] = {
        {master, &DeepSpeedParam::master},
        {exp_avg, &DeepSpeedParam::exp_avg},
        {exp_avg_sq, &DeepSpeedParam::exp_avg_sq}};
    for (const auto& [dst, kind] : kinds) {
      if (!dst) continue;
      std::fill(dst, dst + padded, 0.f);
      for (const model::ParamSpec& spec : layout.unit(u).params)
        place(spec, st.params.at(spec.name).*kind, dst);
    }
    return ok_status();
  };
  return part;
}

// Our trainer's state keys from DeepSpeed's (docs/formats/deepspeed.md, "What is carried over").
json training_state(const DeepSpeedState& st) {
  json state = {{"global_step", st.global_steps},
                {"optimizer_updates", st.optimizer_step},
                {"sampler", {{"next_step", st.global_steps}}},
                {"imported_from",
                 {{"format", "deepspeed"},
                  {"ds_version", st.ds_version},
                  {"tag_dir", st.tag_dir},
                  {"world_size", st.world_size},
                  {"stage", st.stage},
                  {"global_samples", st.global_samples},
                  {"skipped_steps", st.skipped_steps}}}};
  const json sched = st.ds_config.value("scheduler", json::object());
  if (sched.is_object() && sched.contains("type") && st.lr_scheduler.is_object() &&
      st.lr_scheduler.contains("last_batch_iteration")) {
    state["schedule"] = {{"type", sched["type"]},
                         {"last_batch_iteration", st.lr_scheduler["last_batch_iteration"]}};
  }
  if (st.loss_scaler.value("dynamic", false)) {
    const json& ls = st.loss_scaler;
    state["loss_scaler"] = {{"cur_scale", ls.value("cur_scale", 1.0)},
                            {"cur_iter", ls.value("cur_iter", int64_t{0})},
                            {"last_overflow_iter", ls.value("last_overflow_iter", int64_t{-1})},
                            {"cur_hysteresis", ls.value("cur_hysteresis", int64_t{1})},
                            {"dynamic", true}};
  }
  return state;
}

}  // namespace

StatusOr<DeepSpeedImportResult> import_deepspeed_checkpoint(Storage& storage,
                                                            const DeepSpeedImport& request,
                                                            const model::ModelConfig& model) {
  if (storage.file_exists(request.out_dir + "/latest")) {
    return failed_precondition(
        "{}: already holds a checkpoint (latest); import into a new "
        "directory",
        request.out_dir);
  }
  ZERO_ASSIGN_OR_RETURN(DeepSpeedState st,
                        read_deepspeed_state(storage, request.ds_dir, request.tag));
  const model::ModelLayout layout(model);
  const sharding::ShardLayout shards(layout, /*world_size=*/1, /*rank=*/0);
  // Every parameter is matched (name and shape) before anything is written.
  std::set<std::string> used;
  DeepSpeedImportResult result;
  for (int u = 0; u < layout.num_units(); ++u) {
    for (const model::ParamSpec& spec : layout.unit(u).params) {
      auto it = st.params.find(spec.name);
      if (it == st.params.end()) {
        return invalid_argument(
            "{}: the model's parameter '{}' is not in the DeepSpeed checkpoint "
            "(another model, or --model's config.json differs?)",
            st.tag_dir, spec.name);
      }
      ZERO_RETURN_IF_ERROR(check_shape(spec, it->second).with_context(st.tag_dir));
      used.insert(spec.name);
      result.params += spec.numel();
    }
  }
  for (const std::string& name : st.order) {
    if (!used.count(name)) {
      return invalid_argument(
          "{}: DeepSpeed's parameter '{}' has no place in this model (another "
          "model, or --model's config.json differs?)",
          st.tag_dir, name);
    }
  }
  SaveRequest r;
  r.out_dir = request.out_dir;
  r.tag = default_tag(st.global_steps);
  r.layout = &layout;
  r.shard_layout = &shards;
  r.stage = st.stage;
  const std::optional<DType> dtype = parse_dtype(st.model_dtype);
  if (!dtype) return internal_error("dtype {}", st.model_dtype);
  r.model_dtype = *dtype;
  r.optimizer_type = st.optimizer_type;
  r.beta1 = st.beta1;
  r.beta2 = st.beta2;
  for (int u = 0; u < layout.num_units(); ++u)
    r.partitions.push_back(streamed_unit(layout, u, shards.unit(u).padded_numel, st));
  r.state = training_state(st);
  r.effective_config = st.ds_config;
  // A directory made here is removed again if the write fails: a failed import leaves nothing.
  const bool made_out_dir = !storage.file_exists(request.out_dir);
  ZERO_RETURN_IF_ERROR(storage.make_dirs(request.out_dir));
  SelfCommunicator comm;
  StatusOr<SaveResult> saved = save_checkpoint(storage, comm, r);
  if (!saved.ok()) {
    if (made_out_dir) (void)storage.remove_dir(request.out_dir);
    return saved.status();
  }
  result.tag_dir = saved->tag_dir;
  result.global_step = st.global_steps;
  result.optimizer_step = st.optimizer_step;
  result.stage = st.stage;
  result.world_size = st.world_size;
  return result;
}

}  // namespace zero::checkpoint
