// `zero data prepare`: text files and JSONL -> token ids + loss mask + manifest
// (docs/formats/data.md, "Prepared data"). Documents are separated by the tokenizer's EOS.
//   plain text (any extension but .jsonl): the whole file is one document, all trained on;
//   JSONL: one object per line, {"text": ...} (all trained on) or {"prompt": ..., "completion":
//   ...} (prompt tokens masked, as HF's -100 labels) or {"messages": [...]} (rendered by the
//   tokenizer's chat template, text/chat_template.h; only assistant replies trained on); blank
//   lines skipped.
// Each document is: the tokenizer's special prefix (BOS; mask 0) + text ids + EOS (mask 1).
// A prompt/completion pair is encoded as two pieces (prompt, then completion) without special
// tokens, so the boundary between them is a token boundary.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/storage.h"
#include "data/prepared_data.h"
#include "text/tokenizer.h"

namespace zero::text {

struct PreparedTokens {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;  // one per id: 1 = trained on
  int64_t documents = 0;
};

// Appends the documents of one input file's `content` to `out`. `source` names the file in
// errors ("FILE:LINE: ..."); `jsonl` selects the JSONL reader. On error `out` may hold part of
// the file. REQUIRES: tokenizer.eos_id() is set.
Status prepare_file_content(const Tokenizer& tokenizer, std::string_view content,
                            const std::string& source, bool jsonl, PreparedTokens* out);

// Reads every file of `inputs` in order, tokenizes, and writes PREFIX.tokens, PREFIX.mask and
// PREFIX.manifest.json (through temporary names renamed at the end: on error nothing is written
// and no earlier output is replaced). The tokens are uint16 when the vocabulary fits, else uint32.
// Documents are encoded on `num_threads` threads; the output does not depend on the count.
StatusOr<PreparedManifest> prepare_files(Storage& storage, const Tokenizer& tokenizer,
                                         const std::vector<std::string>& inputs,
                                         const std::string& prefix, int num_threads = 1);

}  // namespace zero::text
