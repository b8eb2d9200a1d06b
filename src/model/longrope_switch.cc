// LongropeSwitch (longrope_switch.h): longrope's short / long tables in cached decoding.
#include "model/longrope_switch.h"

#include "core/check.h"

namespace zero::model {

LongropeSwitch::LongropeSwitch(const kernels::cpu::RopeScaling& scaling, int64_t capacity,
                               int64_t slots)
    : active_(scaling.type == "longrope" && capacity > scaling.original_max_position_embeddings),
      original_(scaling.original_max_position_embeddings) {
  if (active_) cached_tokens_.resize(static_cast<size_t>(slots));
}

std::span<const SlotTokens> LongropeSwitch::entries_to_run(std::span<const SlotTokens> entries,
                                                           std::vector<int64_t>& lengths) {
  if (!active_) return entries;
  entries_.assign(entries.begin(), entries.end());
  joined_.resize(entries.size());  // sized before any pointer into it is taken
  for (size_t e = 0; e < entries.size(); ++e) {
    SlotTokens& entry = entries_[e];
    ZERO_CHECK(entry.slot >= 0 && entry.slot < static_cast<int64_t>(lengths.size()),
               "LongropeSwitch: slot ", entry.slot, " of ", lengths.size());
    int64_t& length = lengths[static_cast<size_t>(entry.slot)];
    if (length > original_) continue;  // past it already: every cached key is long
    std::vector<int32_t>& cached = cached_tokens_[static_cast<size_t>(entry.slot)];
    cached.resize(static_cast<size_t>(length));  // a reset slot starts again
    if (length + entry.n <= original_) {         // still within it: short, kept for a crossing
      cached.insert(cached.end(), entry.tokens, entry.tokens + entry.n);
      continue;
    }
    // The crossing: the slot's cached positions again, then the new ones, all long.
    joined_[e] = cached;
    joined_[e].insert(joined_[e].end(), entry.tokens, entry.tokens + entry.n);
    entry.tokens = joined_[e].data();
    entry.n = static_cast<int64_t>(joined_[e].size());
    length = 0;
    cached.clear();
  }
  return entries_;
}

}  // namespace zero::model
