// The training state of a DeepSpeed checkpoint directory (docs/formats/deepspeed.md), read through
// the restricted torch.save reader (torch_archive.h): per parameter (DeepSpeed's module names, in
// the HF layout the model saved), the fp32 master weights and the Adam moments, unpartitioned; the
// step counts, the LR scheduler position, the loss scaler and the ds_config. ZeRO stages 1 and 2
// (`single_partition_of_fp32_groups` + `base_optimizer_state`, also as BF16_Optimizer writes
// them) and 3 (`fp32_flat_groups` + `optimizer_state_dict`), one file per data-parallel rank; or
// the per-parameter files of DeepSpeed's universal checkpoint (ds_to_universal's output).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/storage.h"

namespace zero::checkpoint {

struct DeepSpeedParam {
  std::vector<int64_t> shape;  // as DeepSpeed's module holds it (HF layout)
  std::vector<float> master, exp_avg, exp_avg_sq;
};

struct DeepSpeedState {
  std::string tag_dir;
  std::string ds_version;
  // How the optimizer state was saved: "zero" (ZeRO stage 1/2/3 partitions per rank),
  // "bf16_optimizer" (DeepSpeed's BF16_Optimizer: bf16 at stage 1 with fp32 accumulation) or
  // "universal" (ds_to_universal's zero/<parameter>/*.pt).
  std::string layout;
  int stage = 0;
  int world_size = 0;        // data-parallel ranks that saved (dp_world_size)
  int64_t global_steps = 0;  // engine steps taken (incl. skipped ones)
  int64_t global_samples = 0;
  int64_t skipped_steps = 0;
  int64_t optimizer_step = 0;  // Adam's bias-correction step (base optimizer state "step")
  std::string optimizer_type;  // "adamw" / "adam" (our names)
  double beta1 = 0.9, beta2 = 0.999;
  std::string model_dtype = "f32";  // "bf16" / "f16" from ds_config
  nlohmann::json ds_config;
  nlohmann::json lr_scheduler;  // the scheduler's state_dict, e.g. {last_batch_iteration}
  nlohmann::json loss_scaler;   // DeepSpeed's loss scaler attributes (cur_scale, ...)
  std::map<std::string, std::string> shared_params;  // tied name -> the name that holds it
  std::vector<std::string> order;                    // parameter names in DeepSpeed's order
  std::map<std::string, DeepSpeedParam> params;
};

// Reads `dir` (a DeepSpeed save directory with `latest`, or a tag directory; `tag` overrides
// `latest`). Errors name the file and what is missing or refused: another optimizer than Adam /
// AdamW, a missing rank file, partitions that do not add up to the parameter shapes. Memory: the
// parameters' state once, plus one tensor of one rank file at a time (each rank file's tensors
// are scattered into the parameters as they are read).
StatusOr<DeepSpeedState> read_deepspeed_state(Storage& storage, const std::string& dir,
                                              const std::string& tag = "");

}  // namespace zero::checkpoint
