// Recognises a DeepSpeed checkpoint directory (engine.save_checkpoint's layout: `latest`,
// zero_to_fp32.py, <tag>/mp_rank_00_model_states.pt, [bf16_]zero_pp_rank_N_mp_rank_00_
// optim_states.pt, ...) so that --resume_from_checkpoint and `zero ckpt` can say what they were
// given and how to import it (`zero ckpt import`, deepspeed_import.h) instead of
// "manifest.json: no such file".
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "core/storage.h"

namespace zero::checkpoint {

struct DeepSpeedCheckpoint {
  bool found = false;
  std::string tag_dir;                   // the directory holding the *_states.pt files
  std::string tag;                       // e.g. global_step10 ("" if `dir` itself is the tag dir)
  std::vector<std::string> model_files;  // *_model_states.pt, sorted
  std::vector<std::string> optim_files;  // *_optim_states.pt, sorted
  bool has_zero_to_fp32 = false;         // zero_to_fp32.py in the save directory
};

// Looks at `dir` (a DeepSpeed save directory with `latest` -- or only `latest_universal`, naming
// ds_to_universal's output --, or a tag directory itself), with `tag` overriding `latest`. found ==
// false when it is not a DeepSpeed checkpoint (ZeRO.cpp's own checkpoints, with manifest.json,
// never are). Errors only on an unreadable `latest`.
StatusOr<DeepSpeedCheckpoint> find_deepspeed_checkpoint(Storage& storage, const std::string& dir,
                                                        const std::string& tag = "");

// ok when `dir` is not a DeepSpeed checkpoint; otherwise an error naming what was found and the
// commands that import it (`zero ckpt import`) or convert its weights (DeepSpeed's zero_to_fp32.py
// to an HF directory, then --model).
Status refuse_deepspeed_checkpoint(Storage& storage, const std::string& dir,
                                   const std::string& tag = "");

}  // namespace zero::checkpoint
