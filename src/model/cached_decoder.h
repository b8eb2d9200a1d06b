// CachedDecoder: what generation (runtime/generate.h) needs of a key/value-cached decoder, so one
// sampling loop drives the CPU's (KvDecoder) and the GPU's (CudaKvDecoder). The cache has slots,
// one sequence each with its own positions: a batched append runs the new rows of several
// sequences (ragged: a prompt's prefill beside other sequences' single decode rows) through one
// forward, each unit acquired once for the whole batch, each row attending over its own slot only.
#pragma once

#include <cstdint>
#include <span>

#include "model/param_access.h"

namespace zero::model {

// The new rows one sequence adds in a batched append.
struct SlotTokens {
  int64_t slot = 0;                 // the sequence's slot, in [0, slots())
  const int32_t* tokens = nullptr;  // n token ids, in [0, vocab_size)
  int64_t n = 0;                    // >= 1
};

class CachedDecoder {
 public:
  virtual ~CachedDecoder() = default;

  // Sequences the cache holds at once; positions each slot holds at most.
  virtual int64_t slots() const = 0;
  virtual int64_t capacity() const = 0;
  // Positions cached so far in `slot`.
  virtual int64_t slot_length(int64_t slot) const = 0;
  // Forgets every cached position of `slot` (the others keep theirs).
  virtual void reset_slot(int64_t slot) = 0;
  // One forward over every entry's rows: entry e's tokens run at positions [slot_length(slot),
  // slot_length(slot) + n) of its slot, their keys and values are cached there, and the logits of
  // its last row (vocab_size floats) go to row e of `logits` (entries.size(), vocab_size), host
  // memory. REQUIRES: entries non-empty, their slots distinct, each n >= 1 and
  // slot_length(slot) + n <= capacity().
  virtual void append_batch(ParamAccess& params, std::span<const SlotTokens> entries,
                            float* logits) = 0;
  // Device bytes the decoder holds (its cache and scratch); 0 for one in host memory.
  virtual int64_t device_bytes() const { return 0; }

  // One sequence, in slot 0.
  int64_t length() const { return slot_length(0); }
  void reset() {
    for (int64_t s = 0; s < slots(); ++s) reset_slot(s);
  }
  // Runs tokens[0, n) at positions [length(), length() + n) of slot 0 and writes the logits of the
  // last one to `logits`. REQUIRES: n >= 1, length() + n <= capacity().
  void append(ParamAccess& params, const int32_t* tokens, int64_t n, float* logits) {
    const SlotTokens entry{.slot = 0, .tokens = tokens, .n = n};
    append_batch(params, std::span<const SlotTokens>(&entry, 1), logits);
  }
};

}  // namespace zero::model
