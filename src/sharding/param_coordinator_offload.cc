// ParamCoordinator with offloaded shards on a device (ZeRO-Infinity: stage 3, offload_param cpu or
// nvme, the model on a device): the copies between the host shards and the device (see
// param_coordinator.h). Everything else is the coordinator's one algorithm.
#include <algorithm>

#include "core/check.h"
#include "sharding/param_coordinator.h"

namespace zero::sharding {

int64_t offloaded_param_slot_numel(const ShardLayout& layout) {
  int64_t max_shard = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    max_shard = std::max(max_shard, layout.unit(u).shard_numel);
  }
  return 2 * max_shard;
}

Status ParamCoordinator::set_host_values(int u, const TensorView& values) {
  ZERO_CHECK(upload_, "set_host_values of unit ", u, ": only with offloaded shards on a device");
  ZERO_CHECK(values.device == Device::kCpu && values.numel() == layout_.unit(u).shard_numel,
             "set_host_values of unit ", u, ": ", values.numel(), " values (want ",
             layout_.unit(u).shard_numel, " in host memory)");
  Unit& unit = units_[static_cast<size_t>(u)];
  if (unit.has_pending) wait_pending(u);
  // The host shard (or an NVMe shard's loaded copy, which the write drops) may still be read by an
  // upload; the host write must come after it.
  wait_uploaded(u);
  ZERO_RETURN_IF_ERROR(store_->write(u, values.data, values.dtype));
  return after_shard_install(u);
}

void ParamCoordinator::wait_uploaded(int u) {
  const Unit& unit = units_[static_cast<size_t>(u)];
  // Why a host wait: the host is about to rewrite (or free) memory the copy reads. Done already in
  // practice: the compute stream waited for the gather before the step's host sync.
  if (unit.uploaded != nullptr) unit.uploaded->synchronize();
}

void ParamCoordinator::drop_uploaded(bool all) {
  // Loaded copies kept at once: the read-ahead's four and the uploads in flight.
  constexpr size_t kMaxLoaded = 4;
  // The oldest beyond that are waited for (their uploads were issued first).
  size_t excess = nvme_loaded_.size() > kMaxLoaded ? nvme_loaded_.size() - kMaxLoaded : 0;
  std::erase_if(nvme_loaded_, [&](int u) {
    const device::Event* up = units_[static_cast<size_t>(u)].uploaded.get();
    const bool force = all || excess > 0;
    if (excess > 0) excess -= 1;
    if (!force && up != nullptr && !up->query()) return false;
    wait_uploaded(u);
    store_->drop(u);
    return true;
  });
}

void ParamCoordinator::upload_and_gather(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  const int64_t P = layout_.unit(u).shard_numel;
  const DType dtype = options_.model_dtype;
  device::Backend& backend = ctx_->backend();
  drop_uploaded(/*all=*/false);
  // An NVMe shard is read (or its read-ahead completed) here. On an I/O error the gather still
  // runs on whatever the buffer holds, so every rank issues the same collectives; the error
  // surfaces through status() after the micro-step.
  StatusOr<const void*> shard = store_->load(u);
  if (!shard.ok()) note_status(shard.status());
  // No host wait: the copy waits for the compute stream's work queued so far (kernels still
  // reading the pooled buffer it reuses, the gathers before it).
  ctx_->compute().record(*compute_mark_);
  copy_->wait(*compute_mark_);
  if (shard.ok()) {
    backend.transfer(*copy_, view_of(own_block(u), P),
                     TensorView{const_cast<void*>(*shard), dtype, Shape{P}, Device::kCpu});
    transfers_.h2d_bytes += P * static_cast<int64_t>(dtype_bytes(dtype));
    transfers_.uploads += 1;
  }
  if (unit.uploaded == nullptr) unit.uploaded = backend.create_event();
  copy_->record(*unit.uploaded);
  if (store_->on_nvme(u) &&
      std::find(nvme_loaded_.begin(), nvme_loaded_.end(), u) == nvme_loaded_.end()) {
    nvme_loaded_.push_back(u);
  }
  if (layout_.world_size() > 1) {
    // In place from the own block, after the copy (which came after the compute stream's work).
    issue_gather(u, nullptr, unit.uploaded.get());
    return;
  }
  // A world of one: the copy is the gather; acquire() makes the compute stream wait for it.
  const CommKind kind = options_.allgather_partitions ? CommKind::kAllGather : CommKind::kBroadcast;
  comm_.record_elided(kind, static_cast<size_t>(P), dtype);
  unit.pending = CommHandle{};
  unit.done = unit.uploaded;
  unit.has_pending = true;
}

Status ParamCoordinator::download_shard(int u, const void* values, DType values_dtype) {
  const int64_t P = layout_.unit(u).shard_numel;
  const DType dtype = options_.model_dtype;
  device::Backend& backend = ctx_->backend();
  device::Stream& compute = ctx_->compute();
  if (down_slots_.empty()) {
    const int64_t slot_numel = offloaded_param_slot_numel(layout_) / 2;
    for (int k = 0; k < 2; ++k) {
      StatusOr<device::DeviceBuffer> b = backend.allocate(dtype, std::max<int64_t>(slot_numel, 1));
      if (!b.ok()) return b.status().with_context("the parameter offload's device slots");
      memory_.device_bytes += static_cast<int64_t>(b->view().nbytes());
      down_slots_.push_back(std::move(*b));
      down_done_.push_back(backend.create_event());
    }
  }
  // The slot's last copy to the host has read it before the cast rewrites it (a stream wait).
  const auto k = static_cast<size_t>(next_down_);
  next_down_ = (next_down_ + 1) % static_cast<int>(down_slots_.size());
  compute.wait(*down_done_[k]);
  // Rounded to the model dtype (round-to-nearest-even, bitwise core/dtype.h; values in the model
  // dtype copied as they are) on the compute stream, after the update that wrote them.
  const TensorView slot = view_of(down_slots_[k].data(), P);
  backend.copy(compute, slot,
               TensorView{const_cast<void*>(values), values_dtype, Shape{P}, ctx_->device()});
  compute.record(*compute_mark_);
  copy_->wait(*compute_mark_);
  const bool nvme = store_->on_nvme(u);
  if (nvme && down_host_.data() == nullptr) {
    StatusOr<device::DeviceBuffer> b =
        backend.allocate_host(dtype, std::max<int64_t>(offloaded_param_slot_numel(layout_) / 2, 1));
    if (!b.ok()) return b.status().with_context("the parameter offload's NVMe write buffer");
    memory_.pinned_bytes += static_cast<int64_t>(b->view().nbytes());
    down_host_ = std::move(*b);
  }
  // A host shard is rewritten after the uploads before it on the same stream (and before the
  // next one); no host write touches it meanwhile (set_host_values waits for the uploads).
  void* host = nvme ? down_host_.data() : store_->host_shard(u);
  backend.transfer(*copy_, TensorView{host, dtype, Shape{P}, Device::kCpu}, slot);
  copy_->record(*down_done_[k]);
  transfers_.d2h_bytes += P * static_cast<int64_t>(dtype_bytes(dtype));
  if (!nvme) return ok_status();
  // Why a host wait: the swap write reads the values in host memory. (The write drops a loaded
  // copy, which an upload may still read.)
  down_done_[k]->synchronize();
  wait_uploaded(u);
  std::erase(nvme_loaded_, u);
  return store_->write(u, down_host_.data(), dtype);
}

}  // namespace zero::sharding
