// The engine as a checkpoint sees it: this rank's partitions (state on NVMe streamed, one tensor
// of one unit at a time) and the save request every caller starts from (the trainer's periodic
// saves, `zero bench ckpt`), so the two cannot drift apart (issue 10 item 6).
#pragma once

#include <vector>

#include "checkpoint/checkpoint.h"
#include "core/status.h"
#include "runtime/engine.h"

namespace zero::runtime {

// One UnitPartition per unit: pointers into RAM, or a reader for state in NVMe swap files.
// REQUIRES: `engine` outlives the returned readers' use.
StatusOr<std::vector<checkpoint::UnitPartition>> checkpoint_partitions(const Engine& engine);

// A SaveRequest with what the engine knows filled in: layouts, stage, model dtype, the optimizer's
// identity, the partitions, and global_step / optimizer_updates / schedule / loss scaler in
// `state`. The caller adds out_dir, tag and its own state keys.
StatusOr<checkpoint::SaveRequest> engine_save_request(const Engine& engine);

}  // namespace zero::runtime
