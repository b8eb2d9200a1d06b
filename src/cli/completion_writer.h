// CompletionWriter: the output of `zero generate --prompts_file`: one JSON line per prompt, written
// and flushed the moment its sequence finishes (so lines come in completion order, each naming its
// prompt's index), so a failure later in the batch loses no finished line. It is the batch's
// observer: it decodes each sequence's new tokens to text as they come and ends a sequence at the
// first of its stop strings. Format: docs/formats/generate.md.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/generate.h"
#include "runtime/prompts_file.h"
#include "text/stream_decoder.h"
#include "text/tokenizer.h"

namespace zero::cli {

class CompletionWriter final : public runtime::BatchObserver {
 public:
  // How new tokens become text.
  enum class Text {
    kTokenizer,  // decoded by the model's tokenizer (special tokens skipped)
    kBytes,      // a byte-level model's bytes
    kNone,       // ids only: no "completion" text, no stop strings
  };
  // Writes to `path` ("-": stdout), created or truncated now. `batch` (whose sequences the batch
  // runs) and `tokenizer` (kTokenizer; may be null otherwise) must outlive the writer. Errors: the
  // file cannot be created.
  static StatusOr<std::unique_ptr<CompletionWriter>> open(const std::string& path,
                                                          const runtime::PromptBatch& batch,
                                                          Text text,
                                                          const text::Tokenizer* tokenizer);
  ~CompletionWriter();
  CompletionWriter(const CompletionWriter&) = delete;
  CompletionWriter& operator=(const CompletionWriter&) = delete;

  // BatchObserver: on_token decodes (true when the text now holds a stop string); on_finish writes
  // and flushes the line (an I/O error names the file).
  bool on_token(int64_t i, int32_t token) override;
  Status on_finish(int64_t i, runtime::FinishReason reason) override;

  // Lines written, and new tokens generated, so far.
  int64_t lines_written() const { return lines_written_; }
  int64_t new_tokens() const { return new_tokens_; }
  // The first text-decoding error (the line was written with the text decoded up to it).
  const Status& decode_status() const { return decode_status_; }

 private:
  // A running sequence's text so far.
  struct Pending {
    std::optional<text::StreamDecoder> stream;
    std::string completion;
    bool stopped = false;  // at a stop string (completion cut before it)
  };
  CompletionWriter(std::string path, std::FILE* file, const runtime::PromptBatch& batch, Text text,
                   const text::Tokenizer* tokenizer);
  Pending& pending(int64_t i);
  // Appends `piece` to the completion; cuts it at the first stop string and returns true if any.
  bool add_text(int64_t i, Pending& p, const std::string& piece);

  std::string path_;
  std::FILE* file_;
  bool owns_file_;
  const runtime::PromptBatch& batch_;
  Text text_;
  const text::Tokenizer* tokenizer_;
  std::vector<std::unique_ptr<Pending>> pending_;  // per sequence; freed when its line is out
  int64_t lines_written_ = 0, new_tokens_ = 0;
  Status decode_status_;
};

}  // namespace zero::cli
