// Decodes generated token ids as they arrive, for streaming output: each push returns the text that
// became final. A character split over several tokens (byte-fallback pieces, byte-level BPE's
// multi-byte characters) is held back until its last byte arrives, so it prints whole; the
// decoder's context rules (Metaspace's leading space) are honoured by decoding every new token
// together with the tokens before it (the prefix/read offsets of HF text-generation-inference).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "text/tokenizer.h"

namespace zero::text {

class StreamDecoder {
 public:
  // `tokenizer` must outlive this. `context` (e.g. the prompt's ids) is what the first generated
  // tokens follow; it is not printed. Special tokens are skipped, as HF's TextStreamer does with
  // skip_special_tokens.
  StreamDecoder(const Tokenizer& tokenizer, std::vector<int32_t> context);

  // Adds one token; returns the text that is now final (often empty while a character is split).
  // An id outside the tokenizer's vocabulary adds nothing (HF's decode skips it).
  StatusOr<std::string> push(int32_t id);
  // The text still held back (an incomplete character at the end: decoded with U+FFFD, as HF).
  StatusOr<std::string> flush();

 private:
  const Tokenizer* tokenizer_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // ids_[prefix_offset_, read_offset_) were printed: the context
  size_t read_offset_ = 0;    // ids_[read_offset_, end) are not printed yet
};

}  // namespace zero::text
