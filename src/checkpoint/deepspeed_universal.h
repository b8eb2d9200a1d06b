// DeepSpeed's universal checkpoint (deepspeed.checkpoint.ds_to_universal's output): the model
// states file(s) copied beside zero/<parameter>/{fp32,exp_avg,exp_avg_sq,step}.pt (each parameter
// whole, in DeepSpeed's module layout) and zero/optimizer_state.pt (param groups, loss scaler).
// Read as another source of deepspeed_state.h's DeepSpeedState.
#pragma once

#include <string>

#include "checkpoint/deepspeed_state.h"
#include "core/status.h"
#include "core/storage.h"

namespace zero::checkpoint {

// True when `tag_dir` holds zero/optimizer_state.pt: ds_to_universal's output.
bool is_universal_checkpoint(Storage& storage, const std::string& tag_dir);

// Fills st.params (every name of st.order, shapes already set from the model states), the Adam
// step, betas and loss scaler from tag_dir/zero/. Each parameter's files are checked against its
// shape before its tensors are allocated. Errors name the file.
Status read_universal_params(Storage& storage, const std::string& tag_dir, DeepSpeedState& st);

}  // namespace zero::checkpoint
