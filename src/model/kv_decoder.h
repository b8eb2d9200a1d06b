// KvDecoder: incremental inference with a key/value cache, for sampling (zero generate). Each
// append() runs only the new tokens through the model, attending over the cached keys and values
// of every earlier position, so producing a token costs one token's forward instead of the whole
// context's. It runs the same forward code as Transformer::forward (block_forward.h); only the
// attention differs (over the cache). The logits equal the full forward's at the same positions up
// to fp32 summation order (tested against it). Host memory; parameters through ParamAccess like
// the training model.
#pragma once

#include <cstdint>
#include <vector>

#include "model/block_forward.h"
#include "model/cached_decoder.h"
#include "model/param_access.h"
#include "model/param_layout.h"

namespace zero::model {

class KvDecoder final : public CachedDecoder {
 public:
  // Keeps up to `capacity` positions (GPT-2: at most max_position_embeddings). The layout must
  // outlive the decoder.
  KvDecoder(const ModelLayout& layout, int64_t capacity);

  // CachedDecoder's contract.
  int64_t length() const override { return length_; }
  int64_t capacity() const override { return capacity_; }
  void reset() override { length_ = 0; }
  void append(ParamAccess& params, const int32_t* tokens, int64_t n, float* logits) override;

 private:
  class CachedAttention;
  // The block forward's buffers for n rows: the scratch below, resized.
  BlockBuffers block_buffers(int64_t n);
  // y(n, Hq, D) = causal attention of q(n, Hq, D) at positions [length_, length_ + n) over the
  // layer's cached keys / values [0, length_ + n).
  void attend(int layer, const float* q, float* y, int64_t n) const;
  // Rows [length_, length_ + n) of the layer's key / value cache.
  float* k_rows(int layer) { return k_cache_[static_cast<size_t>(layer)].data() + length_ * kv_; }
  float* v_rows(int layer) { return v_cache_[static_cast<size_t>(layer)].data() + length_ * kv_; }

  const ModelLayout& layout_;
  int64_t capacity_ = 0;
  int64_t length_ = 0;
  int64_t kv_ = 0;                                     // Hkv * D floats per cached position
  std::vector<std::vector<float>> k_cache_, v_cache_;  // per layer (capacity, Hkv, D)
  std::vector<float> rope_cos_, rope_sin_;             // Llama: (capacity, D/2)
  // Scratch for n rows (resized per append).
  std::vector<float> norm_, mean_, rstd_, qkv_, q_, k_, v_, q_rot_, k_rot_, q_rstd_, k_rstd_, y_,
      x2_, gate_, up_, act_, attn_out_, rstd_post_, mlp_out_, gate_act_;
  std::vector<float> rope_cos_local_, rope_sin_local_;  // Gemma 3's sliding layers: (capacity, D/2)
  // 16-bit models: fp32 copies of the acquired units (the embedding apart: the tied head holds it
  // while the final unit is held).
  WidenBuffer widened_embedding_, widened_unit_;
};

}  // namespace zero::model
