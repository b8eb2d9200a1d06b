// The tokenizer files of an HF model directory travel with the model: `zero train` copies them
// from --model into OUTPUT_DIR/tokenizer/ once at start and next to --save_final's weights, and
// `zero ckpt to-fp32` copies them from CKPT_DIR/tokenizer/, so every saved directory is a complete
// HF model (weights, config.json and the tokenizer).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "core/storage.h"

namespace zero::checkpoint {

// The files copied, whichever exist: tokenizer.json, tokenizer_config.json,
// special_tokens_map.json, tokenizer.model.
const std::vector<std::string>& tokenizer_file_names();

// Copies the tokenizer files that exist in `from_dir` into `to_dir` (created if needed), each
// written to a temporary name and renamed, so a reader never sees half a file; when it copies any,
// the other tokenizer files in `to_dir` (an earlier model's) are removed, so `to_dir` never mixes
// two tokenizers. `copied` (may be null) gets the names copied. A missing or non-directory
// `from_dir`, or one without tokenizer files, changes nothing.
Status copy_tokenizer_files(Storage& storage, const std::string& from_dir,
                            const std::string& to_dir, std::vector<std::string>* copied = nullptr);

// Where `zero train` keeps the tokenizer of a run: OUTPUT_DIR/tokenizer.
std::string run_tokenizer_dir(const std::string& output_dir);

}  // namespace zero::checkpoint
