// The prompts of `zero generate --prompts_file`: a JSONL file, one JSON object per line, each a
// prompt ("prompt": text, or "prompt_tokens": ids) with optional per-line sampling settings that
// override the command line's. The whole file is read, checked and encoded before any generation,
// so a bad line is refused (naming the file, the line and the key) before any work is done.
// Format: docs/formats/generate.md.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "model/model_config.h"
#include "runtime/generate.h"

namespace zero::runtime {

// What a line says about its prompt beyond the sequence itself (echoed in the output line).
struct PromptLine {
  int64_t line = 0;                  // 1-based line of the file
  nlohmann::json prompt;             // the "prompt" string, or the "prompt_tokens" array
  bool prompt_is_text = false;       // "prompt" (else "prompt_tokens")
  std::optional<nlohmann::json> id;  // the line's "id", any JSON value, echoed as is
  int64_t prompt_tokens = 0;         // the prompt's length in tokens
  std::vector<std::string> stop;     // stop strings: the completion ends before the first
};

// A prompts file's sequences (BatchSequence: the encoded prompt and its options) and their lines,
// index for index.
struct PromptBatch {
  std::vector<BatchSequence> sequences;
  std::vector<PromptLine> lines;
};

// A text prompt's ids (the tokenizer's, with its BOS as HF's tokenizer(prompt), or a byte-level
// model's bytes); null when the model has no text (ids only: "prompt" and "stop" are refused).
using EncodePromptFn = std::function<StatusOr<std::vector<int32_t>>(const std::string& text)>;

// Reads `path`. Each sequence's options are `defaults` with the line's keys applied; its seed is
// the line's "seed", else sequence_seed(defaults.seed, index). Blank lines are skipped (the index
// counts prompts). Errors "PATH:LINE: ..." for: a line that is not a JSON object, an unknown key
// (with the closest known one), a value of the wrong type or out of range, neither or both of
// "prompt" / "prompt_tokens", an id outside [0, vocab_size), a text prompt or stop string for a
// model without text, a prompt longer than the context (generation_context_limit); "PATH: ..." for
// an unreadable file or one without prompts.
StatusOr<PromptBatch> read_prompts_file(const std::string& path, const model::ModelConfig& config,
                                        const SamplingOptions& defaults,
                                        const EncodePromptFn& encode);

}  // namespace zero::runtime
