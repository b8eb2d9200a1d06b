// ShardLayout: each unit's flat buffer padded so its length is a multiple of world_size ×
// alignment; rank r owns the shard [r·P, (r+1)·P), P = padded_numel / world_size (docs/design.md
// §4). Also the name → location index a checkpoint stores. Sizes need not divide the world size:
// padding absorbs it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/param_layout.h"

namespace zero::sharding {

// Shards start on 16-element (64-byte fp32) boundaries.
inline constexpr int64_t kShardAlignNumel = 16;

struct UnitShardInfo {
  int64_t numel = 0;         // real elements of the unit
  int64_t padded_numel = 0;  // multiple of world_size × kShardAlignNumel
  int64_t shard_numel = 0;   // P = padded_numel / world_size
};

class ShardLayout {
 public:
  ShardLayout(const model::ModelLayout& model, int world_size, int rank);

  int world_size() const { return world_size_; }
  int rank() const { return rank_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  const UnitShardInfo& unit(int u) const { return units_[static_cast<size_t>(u)]; }
  // This rank's shard of unit u in unit-flat coordinates: [shard_begin, shard_begin + shard_numel).
  int64_t shard_begin(int u) const { return rank_ * unit(u).shard_numel; }
  int64_t shard_begin(int u, int rank) const { return rank * unit(u).shard_numel; }
  // Elements of the shard that hold real data (the rest is padding): [shard_begin, data_end).
  int64_t shard_data_numel(int u, int rank) const;
  int64_t total_numel() const;
  int64_t total_padded_numel() const;
  int64_t total_shard_numel() const;

  // {"world_size", "units": [{"name", "numel", "padded_numel", "shard_numel",
  //   "params": [{"name", "offset", "numel", "shape"}]}]} — the checkpoint's index.
  nlohmann::json to_json(const model::ModelLayout& model) const;

 private:
  int world_size_;
  int rank_;
  std::vector<UnitShardInfo> units_;
};

}  // namespace zero::sharding
