// Resume banner, schedule-change notes and the step summary (resume_notes.h).
#include "runtime/resume_notes.h"

#include <fmt/format.h>

#include "optim/hf_lr_schedule.h"

namespace zero::runtime {

checkpoint::RunIdentity run_identity(const EngineOptions& engine) {
  checkpoint::RunIdentity id;
  const optim::OptimizerSpec& o = engine.optimizer;
  id.optimizer_type = o.kind == optim::OptimizerKind::kLamb ? "lamb"
                      : o.adam_w_mode                       ? "adamw"
                                                            : "adam";
  id.beta1 = o.beta1;
  id.beta2 = o.beta2;
  id.model_dtype = engine.dtype;
  return id;
}

std::string model_banner(const std::string& description,
                         const checkpoint::LoadedCheckpoint* resume) {
  if (!resume) return description;
  std::string model = description;
  const size_t paren = model.find(" (random init");
  if (paren != std::string::npos) model.resize(paren);
  return fmt::format("{} (weights and optimizer state from {})", model, resume->tag_dir());
}

std::vector<std::string> schedule_change_notes(const checkpoint::LoadedCheckpoint& resume,
                                               const nlohmann::json& effective_config,
                                               int64_t max_steps) {
  std::vector<std::string> notes;
  const nlohmann::json& state = resume.state();
  const nlohmann::json& saved_config =
      resume.manifest().value("effective_config", nlohmann::json::object());
  int64_t saved_max = -1;
  if (state.contains("max_steps") && state["max_steps"].is_number_integer()) {
    saved_max = state["max_steps"].get<int64_t>();
  }
  auto total_steps = [](const nlohmann::json& cfg) -> int64_t {
    if (!cfg.is_object() || !cfg.contains("scheduler")) return -1;
    const nlohmann::json& sch = cfg["scheduler"];
    if (!sch.is_object() || !sch.contains("params")) return -1;
    const nlohmann::json& v = sch["params"].value("total_num_steps", nlohmann::json());
    return v.is_number_integer() ? v.get<int64_t>() : -1;
  };
  int64_t saved_total = total_steps(saved_config);
  int64_t total = total_steps(effective_config);
  const int64_t step = state.value("global_step", int64_t{0});
  // An HF schedule (no scheduler block; optim/hf_lr_schedule.h) spans the run's steps.
  std::string hf_type;
  if (saved_total < 0 && total < 0 && state.contains("schedule") && state["schedule"].is_object() &&
      state["schedule"].value("type", nlohmann::json()).is_string()) {
    hf_type = state["schedule"]["type"].get<std::string>();
    if (optim::hf_schedule_uses_total(hf_type) && saved_max >= 0) {
      saved_total = saved_max;
      total = max_steps;
    }
  }
  if (saved_max >= 0 && saved_max != max_steps) {
    notes.push_back(fmt::format("--max_steps is {}, the checkpoint was saved by a run of {}",
                                max_steps, saved_max));
  }
  if (saved_total >= 0 && total >= 0 && saved_total != total) {
    const std::string type =
        !hf_type.empty() ? "HF " + hf_type
        : effective_config["scheduler"].value("type", nlohmann::json()).is_string()
            ? effective_config["scheduler"]["type"].get<std::string>()
            : "?";
    notes.push_back(fmt::format(
        "the {} schedule's total_num_steps changes from {} to {}: the learning rate from step {} "
        "on follows the new schedule, not the one the checkpoint was on",
        type, saved_total, total, step + 1));
  }
  return notes;
}

std::string steps_summary(int64_t start_step, int64_t max_steps) {
  const int64_t done = max_steps - start_step;
  if (start_step == 0) return fmt::format("{} steps", done);
  return fmt::format("{} steps ({}..{}, resumed at step {})", done, start_step + 1, max_steps,
                     start_step);
}

}  // namespace zero::runtime
