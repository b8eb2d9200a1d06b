// `zero ckpt import`: a DeepSpeed checkpoint (deepspeed_state.h) written as our own checkpoint
// (checkpoint.h) at world size 1, which any world size and stage then loads. Everything is read
// and checked against the model before anything is written; the write is save_checkpoint's
// (a temporary tag directory renamed into place, `latest` replaced last).
#pragma once

#include <string>

#include "checkpoint/deepspeed_state.h"
#include "core/status.h"
#include "core/storage.h"
#include "model/model_config.h"

namespace zero::checkpoint {

struct DeepSpeedImport {
  std::string ds_dir;   // DeepSpeed save directory (with `latest`) or a tag directory
  std::string tag;      // overrides `latest` when set
  std::string out_dir;  // our checkpoint directory to write (must not hold a checkpoint yet)
};

struct DeepSpeedImportResult {
  std::string tag_dir;  // OUT/<tag> written
  int64_t global_step = 0;
  int64_t optimizer_step = 0;
  int stage = 0;
  int world_size = 0;
  int64_t params = 0;  // parameters carried over (elements)
};

// Reads ds_dir, maps DeepSpeed's parameters (HF names) onto `model`'s layout (transposing GPT-2's
// Conv1D weights, a tied head held once), then saves. INVALID_ARGUMENT naming the parameter or the
// optimizer when something cannot be carried over; nothing is written then.
StatusOr<DeepSpeedImportResult> import_deepspeed_checkpoint(Storage& storage,
                                                            const DeepSpeedImport& request,
                                                            const model::ModelConfig& model);

}  // namespace zero::checkpoint
