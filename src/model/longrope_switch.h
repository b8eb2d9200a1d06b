// LongropeSwitch: Phi-3's longrope RoPE in a key/value-cached decoder (KvDecoder, CudaKvDecoder),
// as transformers' generate runs it. It says which table an append's rows use and which entries
// re-encode their slot's cached positions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/rope/rope.h"
#include "model/cached_decoder.h"

namespace zero::model {

// transformers (modeling_rope_utils' longrope_frequency_update) picks the table per forward: the
// long factors when max(position_ids) + 1 > original_max_position_embeddings, the short ones
// otherwise; the attention factor is the same for both. And Phi3ForCausalLM's
// prepare_inputs_for_generation drops the cache on the step whose sequence first passes the
// original context (past length <= original < whole length), so that step re-encodes the sequence
// from position 0 and no key rotated with the short factors stays. So every forward, cached or not,
// sees what the full forward of its sequence sees (Transformer::forward also picks by length), and
// the logits equal it at every length. Here: an append whose slot ends at `end` positions uses the
// long table iff end > original; one that takes its slot past the original context runs the slot's
// cached tokens again before its own.
//
// Batches: transformers runs a left-padded batch with one table per forward, the long one as soon
// as its longest row passes the original context (re-encoding every row then), so its shorter rows
// switch early and give other tokens than each alone. Here each slot switches at its own length: a
// sequence in a batched append gets what transformers' generate gives it alone (batch size 1), as
// everything else in the decoders does (a slot's logits do not depend on the others).
class LongropeSwitch {
 public:
  // Inactive (long_table() false, entries run as given) unless `scaling` is longrope and
  // `capacity` passes its original context.
  LongropeSwitch(const kernels::cpu::RopeScaling& scaling, int64_t capacity, int64_t slots);

  bool active() const { return active_; }
  // The length a decoder builds its short table for: the original context when active.
  int64_t short_table_length(int64_t capacity) const { return active_ ? original_ : capacity; }
  // Whether the rows of an append whose slot ends at `end` positions use the long table.
  bool long_table(int64_t end) const { return active_ && end > original_; }

  // The entries an append runs: as given, except an entry that takes its slot past the original
  // context (slot length <= original < length + n), which runs the slot's cached tokens and then
  // its own from position 0 (its `lengths` entry set to 0; its logits are still its last row's).
  // Keeps the tokens of slots still within the original context. The span and the tokens it
  // points to are valid until the next call.
  // REQUIRES: lengths.size() == slots; the entries' slots distinct (checked by the decoder).
  std::span<const SlotTokens> entries_to_run(std::span<const SlotTokens> entries,
                                             std::vector<int64_t>& lengths);

 private:
  bool active_ = false;
  int64_t original_ = 0;
  // Per slot, its tokens while it is within the original context (what a crossing re-encodes).
  std::vector<std::vector<int32_t>> cached_tokens_;
  // Per rewritten entry: the slot's cached tokens, then the entry's.
  std::vector<std::vector<int32_t>> joined_;
  std::vector<SlotTokens> entries_;
};

}  // namespace zero::model
