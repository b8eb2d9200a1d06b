// What `zero train` says about a resumed run: where its weights come from, how the schedule
// changed if --max_steps did, and how many steps this run did. Plain functions, so they are
// tested without training.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "runtime/engine.h"

namespace zero::runtime {

// The run as a checkpoint records it (optimizer type with Adam's decoupled-decay mode, betas,
// model dtype); LoadedCheckpoint::check_run compares the two.
checkpoint::RunIdentity run_identity(const EngineOptions& engine);

// The model line of the banner: `description` of --model, or for a resumed run the checkpoint the
// weights come from (a preset's "random init" is not what a resumed run trains).
std::string model_banner(const std::string& description,
                         const checkpoint::LoadedCheckpoint* resume);

// Notes for a resumed run whose --max_steps differs from the one the checkpoint was saved under:
// the schedule's total_num_steps (WarmupDecayLR / WarmupCosineLR, or an HF schedule that spans the
// run: the checkpoint's schedule state names it) changes the learning rate from the resumed step
// on. Empty when nothing changed or the checkpoint does not say.
std::vector<std::string> schedule_change_notes(const checkpoint::LoadedCheckpoint& resume,
                                               const nlohmann::json& effective_config,
                                               int64_t max_steps);

// "8 steps" for a fresh run; "4 steps (5..8, resumed at step 4)" for a resumed one.
std::string steps_summary(int64_t start_step, int64_t max_steps);

}  // namespace zero::runtime
