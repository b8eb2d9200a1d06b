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

// The unit-flat fp32 state of a world-1 checkpoint: whole padded units.
struct UnitBuffers {
  std::vector<float> master, exp_avg, exp_avg_sq;
};

// Copies DeepSpeed's (HF-layout) tensors of one parameter into our layout at `spec.offset`.
Status place(const model::ParamSpec& spec, const DeepSpeedParam& p, UnitBuffers& unit) {
  std::vector<int64_t> ours;
  for (int d = 0; d < spec.shape.rank(); ++d) ours.push_back(spec.shape[d]);
  std::vector<int64_t> want = ours;
  if (spec.hf_transposed && want.size() == 2) std::swap(want[0], want[1]);
  if (p.shape != want) {
    return invalid_argument("parameter '{}': DeepSpeed holds shape [{}], this model [{}]",
                            spec.name, fmt::join(p.shape, ", "), fmt::join(want, ", "));
  }
  const int64_t n = spec.numel();
  auto copy = [&](const std::vector<float>& src, std::vector<float>& dst) {
    float* out = dst.data() + spec.offset;
    if (!spec.hf_transposed) {
      std::copy(src.begin(), src.begin() + n, out);
      return;
    }
    const int64_t rows = ours[0], cols = ours[1];  // ours (out, in); DeepSpeed's (in, out)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = src[static_cast<size_t>(c * rows + r)];
  };
  copy(p.master, unit.master);
  copy(p.exp_avg, unit.exp_avg);
  copy(p.exp_avg_sq, unit.exp_avg_sq);
  return ok_status();
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
  std::vector<UnitBuffers> units(static_cast<size_t>(layout.num_units()));
  std::set<std::string> used;
  DeepSpeedImportResult result;
  for (int u = 0; u < layout.num_units(); ++u) {
    const int64_t padded = shards.unit(u).padded_numel;
    UnitBuffers& b = units[static_cast<size_t>(u)];
    b.master.assign(static_cast<size_t>(padded), 0.f);
    b.exp_avg.assign(static_cast<size_t>(padded), 0.f);
    b.exp_avg_sq.assign(static_cast<size_t>(padded), 0.f);
    for (const model::ParamSpec& spec : layout.unit(u).params) {
      auto it = st.params.find(spec.name);
      if (it == st.params.end()) {
        return invalid_argument(
            "{}: the model's parameter '{}' is not in the DeepSpeed checkpoint "
            "(another model, or --model's config.json differs?)",
            st.tag_dir, spec.name);
      }
      ZERO_RETURN_IF_ERROR(place(spec, it->second, b).with_context(st.tag_dir));
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
  for (int u = 0; u < layout.num_units(); ++u) {
    const UnitBuffers& b = units[static_cast<size_t>(u)];
    r.partitions.push_back(UnitPartition{0, static_cast<int64_t>(b.master.size()), b.master.data(),
                                         b.exp_avg.data(), b.exp_avg_sq.data(), nullptr});
  }
  r.state = training_state(st);
  r.effective_config = st.ds_config;
  ZERO_RETURN_IF_ERROR(storage.make_dirs(request.out_dir));
  SelfCommunicator comm;
  ZERO_ASSIGN_OR_RETURN(SaveResult saved, save_checkpoint(storage, comm, r));
  result.tag_dir = saved.tag_dir;
  result.global_step = st.global_steps;
  result.optimizer_step = st.optimizer_step;
  result.stage = st.stage;
  result.world_size = st.world_size;
  return result;
}

}  // namespace zero::checkpoint
