// Stage-3 inference's parameter source: see gathered_params.h.
#include "runtime/gathered_params.h"

#include <cstdio>

namespace zero::runtime {

StatusOr<std::unique_ptr<GatheredParams>> GatheredParams::create(const model::ModelLayout& layout,
                                                                 Communicator& comm,
                                                                 const UnitInitFn& init) {
  std::unique_ptr<GatheredParams> p(new GatheredParams(layout, comm));
  const sharding::ShardLayout& sl = p->shards_layout_;
  p->shards_.resize(static_cast<size_t>(sl.num_units()));
  for (int u = 0; u < sl.num_units(); ++u) {
    const int64_t begin = sl.shard_begin(u), n = sl.unit(u).shard_numel;
    std::vector<float>& shard = p->shards_[static_cast<size_t>(u)];
    shard.assign(static_cast<size_t>(n), 0.0f);
    // Only the real elements are read; the padding past the unit's numel stays zero.
    const int64_t end = std::min(begin + n, sl.unit(u).numel);
    if (end > begin) ZERO_RETURN_IF_ERROR(init(u, begin, end, shard.data()));
  }
  return p;
}

model::ParamView GatheredParams::acquire(int u) {
  const sharding::UnitShardInfo& info = shards_layout_.unit(u);
  std::vector<float> buffer;
  if (!spare_.empty()) {
    buffer = std::move(spare_.back());
    spare_.pop_back();
  }
  buffer.resize(static_cast<size_t>(info.padded_numel));
  const Status s = comm_
                       .all_gather_async(shards_[static_cast<size_t>(u)].data(), buffer.data(),
                                         static_cast<size_t>(info.shard_numel), DType::kF32)
                       .wait();
  if (!s.ok()) {
    std::fprintf(stderr, "[rank %d] error: gathering unit %d: %s\n", comm_.rank(), u,
                 s.message().c_str());
    comm_.abort_job(1);
  }
  std::vector<float>& held = gathered_[u] = std::move(buffer);
  return {held.data(), DType::kF32, Device::kCpu, info.padded_numel};
}

void GatheredParams::release(int u) {
  auto it = gathered_.find(u);
  if (it == gathered_.end()) return;
  spare_.push_back(std::move(it->second));
  gathered_.erase(it);
}

int64_t GatheredParams::shard_bytes() const {
  int64_t bytes = 0;
  for (const auto& shard : shards_) bytes += static_cast<int64_t>(shard.size() * sizeof(float));
  return bytes;
}

}  // namespace zero::runtime
