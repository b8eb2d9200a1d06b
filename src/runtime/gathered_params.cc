// Stage-3 inference's parameter source: see gathered_params.h.
#include "runtime/gathered_params.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

namespace zero::runtime {
namespace {

constexpr const char* kSwapClass = "block_shards";

std::string read_failure(int layer) {
  return fmt::format("reading its shard of block {} from nvme", layer);
}

}  // namespace

StatusOr<std::unique_ptr<GatheredParams>> GatheredParams::create(const model::ModelLayout& layout,
                                                                 Communicator& comm,
                                                                 const UnitInitFn& init,
                                                                 const Options& options) {
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
  if (!options.nvme_path.empty()) ZERO_RETURN_IF_ERROR(p->store_on_nvme(layout, options));
  return p;
}

Status GatheredParams::store_on_nvme(const model::ModelLayout& layout, const Options& options) {
  offload::NvmeSwapperOptions so;
  so.nvme_path = options.nvme_path;
  so.rank = comm_.rank();  // the file's name; the per-run directory is this rank's already
  so.aio = options.aio;
  so.fault_hook = options.fault_hook;
  ZERO_ASSIGN_OR_RETURN(swapper_, offload::NvmeSwapper::create(so));
  const int num_blocks = layout.num_units() - 2;
  layer_of_unit_.assign(static_cast<size_t>(layout.num_units()), -1);
  uint64_t total = 0;
  size_t max_numel = 0;
  for (int l = 0; l < num_blocks; ++l) {
    const int u = layout.block_unit(l);
    layer_of_unit_[static_cast<size_t>(u)] = l;
    block_unit_.push_back(u);
    file_offset_.push_back(total);
    const size_t numel = shards_[static_cast<size_t>(u)].size();
    total += offload::NvmeSwapper::slot_bytes(numel * sizeof(float));
    max_numel = std::max(max_numel, numel);
  }
  ZERO_RETURN_IF_ERROR(swapper_->add_file(kSwapClass, total));
  // Written once, then dropped from host memory: between forwards this rank holds only the shards
  // of the units that are not blocks and the two staging buffers.
  for (int l = 0; l < num_blocks; ++l) {
    std::vector<float>& shard = shards_[static_cast<size_t>(layout.block_unit(l))];
    ZERO_RETURN_IF_ERROR(swapper_->write(kSwapClass, file_offset_[static_cast<size_t>(l)],
                                         shard.size() * sizeof(float), shard.data()));
    std::vector<float>().swap(shard);
  }
  for (Staging& s : staging_) s.values.resize(max_numel);
  return ok_status();
}

GatheredParams::~GatheredParams() {
  // A read-ahead may still be writing into a staging buffer: its error no longer matters.
  if (swapper_ != nullptr) (void)swapper_->wait_all();
}

void GatheredParams::fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "[rank %d] error: %s: %s\n", comm_.rank(), what.c_str(),
               s.message().c_str());
  comm_.abort_job(1);
  std::abort();  // not reached: abort_job never returns (GCC does not see that through virtuals)
}

void GatheredParams::start_read(int layer, Staging& s) {
  const int u = block_unit_[static_cast<size_t>(layer)];
  const size_t bytes = static_cast<size_t>(shards_layout_.unit(u).shard_numel) * sizeof(float);
  auto ticket = swapper_->submit_read(kSwapClass, file_offset_[static_cast<size_t>(layer)], bytes,
                                      s.values.data());
  if (!ticket.ok()) fail(read_failure(layer), ticket.status());
  s.layer = layer;
  s.read = *ticket;
}

const float* GatheredParams::shard_of(int u) {
  const int layer = swapper_ == nullptr ? -1 : layer_of_unit_[static_cast<size_t>(u)];
  if (layer < 0) return shards_[static_cast<size_t>(u)].data();
  // The models acquire the blocks in order, so the read issued with the previous block is this
  // one's; otherwise (the first acquire, another order) both buffers are settled and it is read
  // now. A read nobody uses any more is waited for and dropped.
  auto hit = std::find_if(staging_.begin(), staging_.end(),
                          [layer](const Staging& s) { return s.layer == layer; });
  if (hit == staging_.end()) {
    for (Staging& s : staging_) {
      if (s.read) (void)swapper_->wait(*s.read);
      s.read.reset();
      s.layer = -1;
    }
    hit = staging_.begin();
    start_read(layer, *hit);
  }
  Staging& now = *hit;
  if (now.read) {
    const Status s = swapper_->wait(*now.read);
    now.read.reset();
    if (!s.ok()) fail(read_failure(layer), s);
  }
  // The other buffer's block was gathered already (gathers are synchronous): the next block's read
  // goes there, overlapping this gather and this block's compute.
  const int num_blocks = static_cast<int>(file_offset_.size());
  Staging& next = &now == &staging_[0] ? staging_[1] : staging_[0];
  if (num_blocks > 1 && next.layer != (layer + 1) % num_blocks) {
    if (next.read) (void)swapper_->wait(*next.read);
    start_read((layer + 1) % num_blocks, next);
  }
  return now.values.data();
}

model::ParamView GatheredParams::acquire(int u) {
  const sharding::UnitShardInfo& info = shards_layout_.unit(u);
  const float* shard = shard_of(u);
  std::vector<float> buffer;
  if (!spare_.empty()) {
    buffer = std::move(spare_.back());
    spare_.pop_back();
  }
  buffer.resize(static_cast<size_t>(info.padded_numel));
  const Status s = comm_
                       .all_gather_async(shard, buffer.data(),
                                         static_cast<size_t>(info.shard_numel), DType::kF32)
                       .wait();
  if (!s.ok()) fail(fmt::format("gathering unit {}", u), s);
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

int64_t GatheredParams::staging_bytes() const {
  int64_t bytes = 0;
  for (const Staging& s : staging_) bytes += static_cast<int64_t>(s.values.size() * sizeof(float));
  return bytes;
}

int64_t GatheredParams::nvme_bytes() const {
  if (swapper_ == nullptr) return 0;
  int64_t bytes = 0;
  for (size_t l = 0; l < file_offset_.size(); ++l) {
    bytes += shards_layout_.unit(block_unit_[l]).shard_numel * static_cast<int64_t>(sizeof(float));
  }
  return bytes;
}

std::string GatheredParams::swap_dir() const {
  if (swapper_ == nullptr) return "";
  const std::string file = swapper_->file_path(kSwapClass);
  return file.substr(0, file.find_last_of('/'));
}

}  // namespace zero::runtime
