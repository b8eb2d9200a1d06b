// `zero train --resume_from_checkpoint DS_DIR` with a DeepSpeed checkpoint directory: imported
// once into our own format (checkpoint/deepspeed_import.h), then resumed from like any checkpoint.
#pragma once

#include <string>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/model_config.h"

namespace zero::runtime {

// Rank 0 imports `ds_dir` into OUTPUT_DIR/deepspeed_import (made anew each time) for a model of
// `config`; the outcome is broadcast, so no rank opens a half-written import and a failed import
// stops every rank with rank 0's reason. Returns the imported checkpoint's directory. Collective.
StatusOr<std::string> import_deepspeed_for_resume(const std::string& ds_dir,
                                                  const std::string& output_dir,
                                                  const model::ModelConfig& config,
                                                  Communicator& comm);

}  // namespace zero::runtime
