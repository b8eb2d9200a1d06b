// CachedDecoder: what generation (runtime/generate.h) needs of a key/value-cached decoder, so one
// sampling loop drives the CPU's (KvDecoder) and the GPU's (CudaKvDecoder).
#pragma once

#include <cstdint>

#include "model/param_access.h"

namespace zero::model {

class CachedDecoder {
 public:
  virtual ~CachedDecoder() = default;

  // Positions cached so far, and the most the cache holds.
  virtual int64_t length() const = 0;
  virtual int64_t capacity() const = 0;
  // Forgets every cached position.
  virtual void reset() = 0;
  // Runs tokens[0, n) at positions [length(), length() + n), caches their keys and values and
  // writes the logits of the last one (vocab_size floats, host memory) to `logits`.
  // REQUIRES: n >= 1, length() + n <= capacity(), tokens in [0, vocab_size).
  virtual void append(ParamAccess& params, const int32_t* tokens, int64_t n, float* logits) = 0;
  // Device bytes the decoder holds (its cache and scratch); 0 for one in host memory.
  virtual int64_t device_bytes() const { return 0; }
};

}  // namespace zero::model
