// Shard arithmetic for units.
#include "sharding/shard_layout.h"

#include <algorithm>

#include "core/check.h"

namespace zero::sharding {

ShardLayout::ShardLayout(const model::ModelLayout& model, int world_size, int rank)
    : world_size_(world_size), rank_(rank) {
  ZERO_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "bad rank ", rank, " of ",
             world_size);
  const int64_t quantum = static_cast<int64_t>(world_size) * kShardAlignNumel;
  for (const auto& u : model.units()) {
    UnitShardInfo info;
    info.numel = u.numel;
    info.padded_numel = (u.numel + quantum - 1) / quantum * quantum;
    info.shard_numel = info.padded_numel / world_size;
    units_.push_back(info);
  }
}

int64_t ShardLayout::shard_data_numel(int u, int rank) const {
  const UnitShardInfo& info = unit(u);
  const int64_t begin = shard_begin(u, rank);
  return std::clamp<int64_t>(info.numel - begin, 0, info.shard_numel);
}

int64_t ShardLayout::total_numel() const {
  int64_t n = 0;
  for (const auto& u : units_) n += u.numel;
  return n;
}

int64_t ShardLayout::total_padded_numel() const {
  int64_t n = 0;
  for (const auto& u : units_) n += u.padded_numel;
  return n;
}

int64_t ShardLayout::total_shard_numel() const {
  int64_t n = 0;
  for (const auto& u : units_) n += u.shard_numel;
  return n;
}

nlohmann::json ShardLayout::to_json(const model::ModelLayout& model) const {
  nlohmann::json units = nlohmann::json::array();
  for (int u = 0; u < num_units(); ++u) {
    nlohmann::json params = nlohmann::json::array();
    for (const auto& p : model.unit(u).params) {
      params.push_back({{"name", p.name},
                        {"offset", p.offset},
                        {"numel", p.numel()},
                        {"shape", p.shape.dims()}});
    }
    units.push_back({{"name", model.unit(u).name},
                     {"numel", unit(u).numel},
                     {"padded_numel", unit(u).padded_numel},
                     {"shard_numel", unit(u).shard_numel},
                     {"params", params}});
  }
  return {{"world_size", world_size_}, {"units", units}};
}

}  // namespace zero::sharding
