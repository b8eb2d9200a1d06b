// KvDecoder: incremental inference with a key/value cache, for sampling (zero generate). Each
// append() runs only the new tokens through the model, attending over the cached keys and values
// of every earlier position, so producing a token costs one token's forward instead of the whole
// context's. It runs the same forward code as Transformer::forward (block_forward.h); only the
// attention differs (over the cache). The logits equal the full forward's at the same positions up
// to fp32 summation order (tested against it). Host memory; parameters through ParamAccess like
// the training model. With several slots, a batched append packs every sequence's new rows into
// one forward (B*T rows of ragged lengths, each with its own position) and each row attends over
// its own slot, so a sequence's logits do not depend on what else is in the batch (up to the GEMM's
// summation order for a different row count). Phi-3's longrope switches from its short to its long
// table as transformers' generate does (longrope_switch.h): per slot, re-encoding the slot's cached
// positions on the append that passes original_max_position_embeddings.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/block_forward.h"
#include "model/cached_decoder.h"
#include "model/longrope_switch.h"
#include "model/param_access.h"
#include "model/param_layout.h"

namespace zero::model {

class KvDecoder final : public CachedDecoder {
 public:
  // Keeps up to `capacity` positions (GPT-2: at most max_position_embeddings) for each of `slots`
  // sequences. The layout must outlive the decoder.
  KvDecoder(const ModelLayout& layout, int64_t capacity, int64_t slots = 1);

  // CachedDecoder's contract.
  int64_t slots() const override { return static_cast<int64_t>(lengths_.size()); }
  int64_t capacity() const override { return capacity_; }
  int64_t slot_length(int64_t slot) const override;
  void reset_slot(int64_t slot) override;
  void append_batch(ParamAccess& params, std::span<const SlotTokens> entries,
                    float* logits) override;

 private:
  class CachedAttention;
  // The block forward's buffers for n rows: the scratch below, resized.
  BlockBuffers block_buffers(int64_t n);
  // y(N, Hq, D) = causal attention of q(N, Hq, D): row r, at position row_position_[r] of slot
  // row_slot_[r], over that slot's cached keys / values up to its own position.
  void attend(int layer, const float* q, float* y) const;
  // The first cached row of `slot` in the layer's key / value cache.
  float* k_slot(int layer, int64_t slot) {
    return k_cache_[static_cast<size_t>(layer)].data() + slot * capacity_ * kv_;
  }
  float* v_slot(int layer, int64_t slot) {
    return v_cache_[static_cast<size_t>(layer)].data() + slot * capacity_ * kv_;
  }
  // rows (N, D/2) = the RoPE table's rows at each row's position: `long_table`'s for the rows that
  // use longrope's long factors (row_long_), `table`'s for the others.
  void gather_rope(const std::vector<float>& table, const std::vector<float>& long_table,
                   std::vector<float>* rows) const;

  const ModelLayout& layout_;
  int64_t capacity_ = 0;
  std::vector<int64_t> lengths_;                       // per slot
  int64_t kv_ = 0;                                     // Hkv * D floats per cached position
  std::vector<std::vector<float>> k_cache_, v_cache_;  // per layer (slots, capacity, Hkv, D)
  std::vector<float> rope_cos_, rope_sin_;             // Llama: (capacity, D/2)
  // longrope past its original context: the long factors' tables (capacity, D/2); rope_cos_ /
  // rope_sin_ hold the short ones.
  LongropeSwitch longrope_;
  std::vector<float> rope_cos_long_, rope_sin_long_;
  // The append's rows (N = the entries' n summed): each one's slot and position, whether it uses
  // longrope's long table, and the entries' first rows (entries + 1: the last is N).
  std::vector<int64_t> row_slot_, row_position_, entry_row_;
  std::vector<bool> row_long_;
  std::vector<float> rows_cos_, rows_sin_, rows_cos_local_, rows_sin_local_;  // (N, D/2)
  std::vector<float> last_rows_;  // (entries, C): each entry's last row, for the head
  // Scratch for n rows (resized per append).
  std::vector<float> norm_, mean_, rstd_, qkv_, q_, k_, v_, q_rot_, k_rot_, q_rstd_, k_rstd_, y_,
      x2_, gate_, up_, act_, attn_out_, rstd_post_, mlp_out_, gate_act_;
  std::vector<float> rope_cos_local_, rope_sin_local_;  // Gemma 3's sliding layers: (capacity, D/2)
  // 16-bit models: fp32 copies of the acquired units (the embedding apart: the tied head holds it
  // while the final unit is held).
  WidenBuffer widened_embedding_, widened_unit_;
};

}  // namespace zero::model
