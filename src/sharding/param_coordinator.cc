// Parameter residency under ZeRO stages 0–3 (see param_coordinator.h).
#include "sharding/param_coordinator.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/check.h"
#include "kernels/elementwise/elementwise.h"

namespace zero::sharding {

ParamCoordinator::ParamCoordinator(const ShardLayout& layout, Communicator& comm,
                                   const ZeroOptions& options, MemoryAccounting& memory,
                                   device::ExecutionContext* device)
    : layout_(layout), comm_(comm), options_(options), memory_(memory), device_(device) {
  units_.resize(static_cast<size_t>(layout.num_units()));
  pool_ = BufferPool(units_.size());  // at most one buffer per unit; trim_pool() bounds the bytes
  int64_t persistent_numel = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    Unit& unit = units_[static_cast<size_t>(u)];
    const UnitShardInfo& info = layout.unit(u);
    if (options_.stage < 3 && device_ == nullptr) {
      unit.full = Tensor(Shape{info.padded_numel}, options_.model_dtype);
      memory_.param_bytes += static_cast<int64_t>(unit.full.nbytes());
    } else if (options_.stage == 3) {
      // Small units stay gathered (DeepSpeed's persistence thresholds, applied per unit).
      if (info.numel <= options_.param_persistence_threshold_numel &&
          persistent_numel + info.numel <= options_.model_persistence_threshold_numel) {
        unit.persistent = true;
        persistent_numel += info.numel;
      }
    }
  }
}

StatusOr<std::unique_ptr<ParamCoordinator>> ParamCoordinator::create(
    const ShardLayout& layout, Communicator& comm, const ZeroOptions& options,
    const ParamOffloadOptions& offload, MemoryAccounting& memory,
    device::ExecutionContext* device) {
  std::unique_ptr<ParamCoordinator> c(new ParamCoordinator(layout, comm, options, memory, device));
  if (device != nullptr) {
    ZERO_CHECK(offload.device == ParamOffload::kNone,
               "device-resident parameters with parameter offload");
    for (int u = 0; u < layout.num_units(); ++u) {
      // Stages 0-2: the full unit; stage 3: the shard (the padded unit at world 1).
      const int64_t numel =
          options.stage == 3 ? layout.unit(u).shard_numel : layout.unit(u).padded_numel;
      StatusOr<device::DeviceBuffer> buf = device->backend().allocate(options.model_dtype, numel);
      if (!buf.ok()) return buf.status().with_context(fmt::format("parameters of unit {}", u));
      const int64_t bytes = static_cast<int64_t>(buf->view().nbytes());
      memory.param_bytes += bytes;
      memory.device_bytes += bytes;
      c->units_[static_cast<size_t>(u)].on_device = std::move(*buf);
    }
    if (layout.world_size() > 1) {
      ZERO_ASSIGN_OR_RETURN(c->collectives_, device::make_stream_collectives(comm, *device));
      c->ready_ = device->backend().create_event();
    }
    return c;
  }
  if (options.stage == 3) {
    std::vector<bool> persistent;
    for (const Unit& u : c->units_) persistent.push_back(u.persistent);
    ZERO_ASSIGN_OR_RETURN(c->store_, ParamStore::create(layout, offload, persistent,
                                                        options.model_dtype, comm.rank(), memory));
  }
  return c;
}

ParamCoordinator::~ParamCoordinator() {
  // Outstanding gathers write into our buffers: let them finish before the buffers go away.
  for (auto& u : units_) {
    if (u.has_pending) (void)u.pending.wait();
  }
  // Why a host wait: queued kernels (and, on the comm stream, gathers) may still read or write the
  // device units freed below (errors are reported by the owner of the stream).
  if (device_ != nullptr) {
    (void)device_->compute().synchronize();
    (void)device_->comm().synchronize();
  }
}

void ParamCoordinator::note_status(const Status& s) {
  if (!s.ok() && status_.ok()) status_ = s;
}

const Status& ParamCoordinator::status() {
  std::erase_if(unchecked_, [this](const CommHandle& h) {
    if (!h.done()) return false;
    note_status(h.wait());
    return true;
  });
  return status_;
}

Status ParamCoordinator::set_values(int u, const float* values) {
  Unit& unit = units_[static_cast<size_t>(u)];
  const UnitShardInfo& info = layout_.unit(u);
  if (unit.has_pending) wait_pending(u);
  if (device_ != nullptr) return set_device_values(u, values, DType::kF32);
  if (options_.stage == 0) {
    // Rounds to the model dtype (round-to-nearest-even: the values round_to_dtype gives).
    kernels::cpu::cast_from_f32(values, unit.full.data(), options_.model_dtype, info.padded_numel);
    return ok_status();
  }
  if (options_.stage == 3) {
    ZERO_RETURN_IF_ERROR(store_->write(u, values));
    // Gathered copies now hold old values: drop them (persistent ones are gathered again on use).
    // A lent shard (world of one) is returned even when persistent: it is lent again on use.
    if (unit.view != nullptr || (unit.gathered && !unit.persistent)) free_gathered(u);
    unit.gathered = false;
    // The next forward starts with this unit: its gather runs on the communication thread while
    // this one updates the units after it, instead of blocking the first acquire of the step.
    if (leads_trace(u)) gather_async(u);
    return status_;
  }
  // Stages 1–2: install the own shard, then make the full unit current on every rank.
  // The own block is written now (the master may change before an overlapped gather completes).
  kernels::cpu::cast_from_f32(values, own_block(u), options_.model_dtype, info.shard_numel);
  issue_gather(u, nullptr);
  if (!options_.overlap_comm) wait_pending(u);
  return status_;
}

Status ParamCoordinator::set_model_dtype_values(int u, const void* values) {
  ZERO_CHECK(device_ != nullptr, "set_model_dtype_values of unit ", u,
             ": only for a coordinator on a device");
  Unit& unit = units_[static_cast<size_t>(u)];
  if (unit.has_pending) wait_pending(u);
  return set_device_values(u, values, options_.model_dtype);
}

Status ParamCoordinator::set_device_values(int u, const void* values, DType values_dtype) {
  Unit& unit = units_[static_cast<size_t>(u)];
  const UnitShardInfo& info = layout_.unit(u);
  device::Backend& backend = device_->backend();
  // The partition: the whole padded unit at stage 0 (and at any stage in a world of one), the own
  // block at stages 1-2. Rounded to the model dtype (round-to-nearest-even, bitwise the host cast;
  // values already in the model dtype are copied as they are), queued on the compute stream after
  // the update that wrote `values` and before the kernels that read the unit.
  const bool whole = options_.stage == 0 || layout_.world_size() == 1;
  const int64_t numel = whole ? info.padded_numel : info.shard_numel;
  void* dst = whole || options_.stage == 3 ? unit.on_device.data() : own_block(u);
  backend.copy(
      device_->compute(), TensorView{dst, options_.model_dtype, Shape{numel}, device_->device()},
      TensorView{const_cast<void*>(values), values_dtype, Shape{numel}, device_->device()});
  if (!whole && options_.stage == 3) {
    // As the host path: gathered copies are stale; the gather of the unit the next forward starts
    // with starts now. The shard is written on the compute stream: the next gather waits for it.
    if (unit.gathered && !unit.persistent) free_gathered(u);
    unit.gathered = false;
    if (leads_trace(u)) gather_async(u);
    return status_;
  }
  if (!whole) {
    // No host wait: the gather waits for an event after the cast above (issue_gather).
    issue_gather(u, nullptr);
    if (!options_.overlap_comm) wait_pending(u);
    return status_;
  }
  // A world of one: the unit is its own gather (counted as one elided collective, as the host
  // paths count it).
  if (options_.stage == 3) {
    if (unit.view != nullptr) free_gathered(u);
    unit.gathered = false;
    return status_;
  }
  if (options_.stage >= 1) {
    const CommKind kind =
        options_.allgather_partitions ? CommKind::kAllGather : CommKind::kBroadcast;
    comm_.record_elided(kind, static_cast<size_t>(info.shard_numel), options_.model_dtype);
  }
  return status_;
}

Status ParamCoordinator::finish_updates() {
  // Stage 3's gathers issued by set_values are prefetches: acquire() waits for them.
  if (options_.stage == 3) return status_;
  for (int u = 0; u < layout_.num_units(); ++u) {
    if (units_[static_cast<size_t>(u)].has_pending) wait_pending(u);
  }
  return status_;
}

void ParamCoordinator::begin_micro_step(bool another_follows) {
  if (options_.stage < 3) return;
  another_micro_step_follows_ = another_follows;
  if (!trace_recorded_ && !trace_.empty()) trace_recorded_ = true;
  if (!trace_valid_) {
    // The access order changed (it should not): record it again, without prefetching meanwhile.
    trace_.clear();
    trace_recorded_ = false;
    trace_valid_ = true;
  }
  trace_pos_ = 0;
}

void ParamCoordinator::wait_pending(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  if (unit.done != nullptr) {
    // No host wait: the compute stream's later work (the model reading the unit, a cast into it,
    // the next gather reusing its buffer) waits for the gather.
    device_->compute().wait(*unit.done);
    unit.done = nullptr;
    unchecked_.push_back(std::move(unit.pending));
    unit.has_pending = false;
    return;
  }
  // Why: the buffer is about to be read (acquire) or rewritten (set_values); the gather must land.
  const auto t0 = std::chrono::steady_clock::now();
  note_status(unit.pending.wait());
  memory_.comm_wait_s +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  unit.has_pending = false;
  // The gather has consumed the shard: an NVMe shard's host copy can go.
  if (store_) store_->drop(u);
}

bool ParamCoordinator::gather_is_view(int u) const {
  return layout_.world_size() == 1 && (device_ != nullptr || !store_->on_nvme(u));
}

void ParamCoordinator::gather_async(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  const UnitShardInfo& info = layout_.unit(u);
  if (gather_is_view(u)) {
    // A world of one: the shard is the unit. Counted as a gathered unit and a gather (the model
    // holds it just the same), so the live limits and the counters are those of any world size.
    // The device unit, or the host shard (never fails, never blocks).
    StatusOr<const void*> shard =
        device_ != nullptr ? StatusOr<const void*>(unit.on_device.data()) : store_->load(u);
    ZERO_CHECK(shard.ok(), shard.status().to_string());
    if (unit.view == nullptr) {
      live_gathered_numel_ += info.padded_numel;
      live_gathered_units_ += 1;
      note_peak_gathered();
    }
    unit.view = *shard;
    const CommKind kind =
        options_.allgather_partitions ? CommKind::kAllGather : CommKind::kBroadcast;
    comm_.record_elided(kind, static_cast<size_t>(info.shard_numel), options_.model_dtype);
    unit.gathered = true;
    unit.gathers += 1;
    return;
  }
  if (device_ != nullptr) {
    gather_on_device(u);
    return;
  }
  if (unit.full.empty()) {
    unit.full = pool_.take(info.padded_numel, options_.model_dtype);  // the gather fills it
    live_gathered_numel_ += info.padded_numel;
    live_gathered_units_ += 1;
    note_peak_gathered();
    trim_pool();
  }
  // An NVMe shard is read (or its read-ahead completed) here; on an I/O error the gather still
  // runs on whatever is there so every rank issues the same collectives, and the error surfaces
  // through status() after the micro-step.
  StatusOr<const void*> shard = store_->load(u);
  if (!shard.ok()) note_status(shard.status());
  issue_gather(u, shard.ok() ? *shard : nullptr);
  unit.gathered = true;
  unit.gathers += 1;
}

void ParamCoordinator::gather_on_device(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  const UnitShardInfo& info = layout_.unit(u);
  if (unit.gathered_dev.data() == nullptr) {
    for (auto it = device_pool_.begin(); it != device_pool_.end(); ++it) {
      if (it->numel() == info.padded_numel) {
        unit.gathered_dev = std::move(*it);
        device_pool_.erase(it);
        break;
      }
    }
    if (unit.gathered_dev.data() == nullptr) {
      StatusOr<device::DeviceBuffer> b =
          device_->backend().allocate(options_.model_dtype, info.padded_numel);
      ZERO_CHECK(b.ok(), "gathering unit ", u, ": ", b.status().to_string());
      memory_.device_bytes += static_cast<int64_t>(b->view().nbytes());
      unit.gathered_dev = std::move(*b);
    }
    live_gathered_numel_ += info.padded_numel;
    live_gathered_units_ += 1;
    note_peak_gathered();
  }
  // No host wait: a pooled buffer may still be read by the compute stream (the unit it held last)
  // and the shard written there; the gather waits for an event after both (issue_gather).
  issue_gather(u, unit.on_device.data());
  unit.gathered = true;
  unit.gathers += 1;
}

char* ParamCoordinator::unit_base(int u) const {
  const Unit& unit = units_[static_cast<size_t>(u)];
  if (device_ == nullptr) return static_cast<char*>(unit.full.data());
  return static_cast<char*>(options_.stage == 3 ? unit.gathered_dev.data() : unit.on_device.data());
}

char* ParamCoordinator::own_block(int u) const {
  return unit_base(u) +
         static_cast<size_t>(layout_.shard_begin(u)) * dtype_bytes(options_.model_dtype);
}

void ParamCoordinator::note_peak_gathered() {
  // Counted at the model dtype's size also for a lent shard (world of one), so the accounting is
  // that of any world size.
  memory_.peak_gathered_param_bytes =
      std::max(memory_.peak_gathered_param_bytes,
               live_gathered_numel_ * static_cast<int64_t>(dtype_bytes(options_.model_dtype)));
  memory_.peak_gathered_units = std::max(memory_.peak_gathered_units, live_gathered_units_);
}

void ParamCoordinator::issue_gather(int u, const void* shard) {
  Unit& unit = units_[static_cast<size_t>(u)];
  const int64_t P = layout_.unit(u).shard_numel;
  const DType dtype = options_.model_dtype;
  const size_t esize = dtype_bytes(dtype);
  char* base = unit_base(u);  // the buffer the collective fills
  const void* in = own_block(u);
  if (shard != nullptr) {
    if (options_.allgather_partitions) {
      in = shard;  // the shard is in the model dtype: the all-gather reads it where it is
    } else {
      // Owner broadcasts send from the unit's own block.
      if (device_ != nullptr) {
        const Device d = device_->device();
        // On the compute stream: the broadcasts wait for an event after it (below).
        device_->backend().copy(device_->compute(), TensorView{own_block(u), dtype, Shape{P}, d},
                                TensorView{const_cast<void*>(shard), dtype, Shape{P}, d});
      } else {
        std::memcpy(own_block(u), shard, static_cast<size_t>(P) * esize);
      }
    }
  }
  if (device_ != nullptr) {
    issue_gather_on_device(u, in);
    return;
  }
  if (options_.allgather_partitions) {
    unit.pending = comm_.all_gather_async(in, base, static_cast<size_t>(P), dtype);
  } else {
    // DeepSpeed's allgather_partitions=false: every owner broadcasts its shard. Handles complete in
    // issue order, so waiting for the last one covers them all.
    for (int r = 0; r < layout_.world_size(); ++r) {
      unit.pending =
          comm_.broadcast_async(base + static_cast<size_t>(layout_.shard_begin(u, r)) * esize,
                                static_cast<size_t>(P), dtype, r);
    }
  }
  unit.has_pending = true;
}

void ParamCoordinator::issue_gather_on_device(int u, const void* in) {
  Unit& unit = units_[static_cast<size_t>(u)];
  const size_t P = static_cast<size_t>(layout_.unit(u).shard_numel);
  const DType dtype = options_.model_dtype;
  char* base = unit_base(u);
  std::vector<CollectiveCall> calls;
  if (options_.allgather_partitions) {
    calls.push_back({CommKind::kAllGather, ReduceOp::kSum, dtype, in, base, P, 0});
  } else {
    // Owner broadcasts: one group per unit (ncclGroupStart/End), completing as one.
    for (int r = 0; r < layout_.world_size(); ++r) {
      char* block = base + static_cast<size_t>(layout_.shard_begin(u, r)) * dtype_bytes(dtype);
      calls.push_back({CommKind::kBroadcast, ReduceOp::kSum, dtype, block, block, P, r});
    }
  }
  // No host wait: the gather waits for this event, after everything queued on the compute stream
  // so far (the cast that wrote the own block or shard, kernels still reading a reused buffer).
  device_->compute().record(*ready_);
  device::OrderedCollective c = collectives_->issue(*ready_, calls);
  unit.pending = std::move(c.handle);
  unit.done = std::move(c.done);
  unit.has_pending = true;
}

void ParamCoordinator::free_gathered(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  if (unit.has_pending) wait_pending(u);
  if (unit.view != nullptr) {
    live_gathered_numel_ -= layout_.unit(u).padded_numel;
    live_gathered_units_ -= 1;
    unit.view = nullptr;
    unit.gathered = false;
    return;
  }
  if (device_ != nullptr) {
    if (unit.gathered_dev.data() == nullptr) return;
    live_gathered_numel_ -= unit.gathered_dev.numel();
    live_gathered_units_ -= 1;
    // Kept for the next gather of this size (freeing device memory would wait for the device);
    // at most one per unit, so the pool is bounded by the model.
    device_pool_.push_back(std::move(unit.gathered_dev));
    unit.gathered = false;
    trim_device_pool();
    return;
  }
  if (unit.full.empty()) return;
  live_gathered_numel_ -= unit.full.numel();
  live_gathered_units_ -= 1;
  pool_.give(std::move(unit.full));
  unit.gathered = false;
  trim_pool();
}

void ParamCoordinator::trim_device_pool() {
  // As trim_pool: kept buffers plus gathered units stay within stage3_max_live_parameters.
  int64_t kept = 0;
  for (const device::DeviceBuffer& b : device_pool_) kept += b.numel();
  const int64_t budget = std::max<int64_t>(0, options_.max_live_numel - live_gathered_numel_);
  if (kept <= budget) return;
  // Why a host wait: queued kernels may still read the buffers freed below (and a gather that
  // wrote one last is covered: the compute stream waited for it before the buffer was pooled).
  note_status(device_->compute().synchronize());
  while (!device_pool_.empty() && kept > budget) {
    kept -= device_pool_.front().numel();
    memory_.device_bytes -= static_cast<int64_t>(device_pool_.front().view().nbytes());
    device_pool_.erase(device_pool_.begin());
  }
}

void ParamCoordinator::trim_pool() {
  pool_.trim(std::max<int64_t>(0, options_.max_live_numel - live_gathered_numel_));
}

bool ParamCoordinator::leads_trace(int u) const {
  if (!trace_recorded_ || !trace_valid_ || trace_.empty() || options_.prefetch_bucket_numel <= 0) {
    return false;
  }
  if (gather_is_view(u) || (store_ != nullptr && store_->on_nvme(u))) return false;
  const UnitShardInfo& info = layout_.unit(u);
  if (live_gathered_numel_ + info.padded_numel > options_.max_live_numel) return false;
  // What acquire(trace_[0]) and its prefetch_after(0) gather: the first unit, then units while
  // their numel fits the bucket (the first of them even when it alone does not).
  if (trace_[0] == u) return true;
  int64_t budget = options_.prefetch_bucket_numel;
  for (size_t i = 1; i < trace_.size(); ++i) {
    const int v = trace_[i];
    const int64_t numel = layout_.unit(v).numel;
    if (numel > budget && i > 1) return false;
    if (v == u) return true;
    budget -= numel;
  }
  return false;
}

bool ParamCoordinator::reused_soon(int u, size_t trace_pos) const {
  if (!trace_recorded_ || !trace_valid_) return false;
  if (live_gathered_numel_ > options_.max_live_numel) return false;
  // The rest of this micro-step's trace, then, when another micro-step of this step follows (it
  // reads the same values in the same order), its trace up to this position.
  const size_t n = trace_.size();
  if (trace_pos > n) return false;
  const size_t span = another_micro_step_follows_ ? n : n - trace_pos;
  int64_t distance = 0;
  for (size_t k = 0; k < span; ++k) {
    const int v = trace_[(trace_pos + k) % n];
    if (v == u) return distance <= options_.max_reuse_distance_numel;
    distance += layout_.unit(v).numel;
  }
  return false;
}

void ParamCoordinator::prefetch_after(size_t trace_pos) {
  // The bucket bounds what is gathered ahead; the next unit is prefetched even when it alone is
  // larger (a Llama-7B block is ~200M elements, above the 5e7 default: DeepSpeed prefetches at
  // parameter granularity, so it still overlaps there). A bucket of 0 turns prefetching off.
  int64_t budget = options_.prefetch_bucket_numel;
  bool first = options_.prefetch_bucket_numel > 0;
  size_t i = trace_pos + 1;
  for (; i < trace_.size(); ++i) {
    const int v = trace_[i];
    Unit& next = units_[static_cast<size_t>(v)];
    const UnitShardInfo& info = layout_.unit(v);
    if (next.gathered) {
      // Already gathered ahead (persistent units aside): it counts against the bucket.
      if (!next.persistent) {
        budget -= info.numel;
        first = false;
      }
      continue;
    }
    if (info.numel > budget && !first) break;
    if (live_gathered_numel_ + info.padded_numel > options_.max_live_numel) break;
    gather_async(v);
    budget -= info.numel;
    first = false;
  }
  // NVMe read-ahead of the shards gathered after those (as far as staging buffers allow, and a
  // few units at most, so loaded shards do not pile up in memory).
  if (store_ && store_->num_on_nvme() > 0) {
    int ahead = 0;
    for (; i < trace_.size() && ahead < 4; ++i) {
      const int v = trace_[i];
      if (units_[static_cast<size_t>(v)].gathered || !store_->on_nvme(v)) continue;
      note_status(store_->prefetch(v));
      ahead += 1;
    }
  }
}

model::ParamView ParamCoordinator::working_view(const Unit& unit) const {
  if (device_ != nullptr) {
    const device::DeviceBuffer& b = options_.stage == 3 ? unit.gathered_dev : unit.on_device;
    return model::ParamView{b.data(), options_.model_dtype, device_->device(), b.numel()};
  }
  return model::ParamView{unit.full.data(), unit.full.dtype(), Device::kCpu, unit.full.numel()};
}

model::ParamView ParamCoordinator::acquire(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  if (options_.stage < 3) {
    if (unit.has_pending) wait_pending(u);
    return working_view(unit);
  }
  if (!trace_recorded_) {
    trace_.push_back(u);
  } else if (trace_pos_ >= trace_.size() || trace_[trace_pos_] != u) {
    trace_valid_ = false;
  }
  if (!unit.gathered) gather_async(u);
  if (unit.has_pending) wait_pending(u);
  unit.refcount += 1;
  if (trace_recorded_ && trace_valid_) prefetch_after(trace_pos_);
  trace_pos_ += 1;
  if (unit.view != nullptr) {
    return model::ParamView{unit.view, options_.model_dtype,
                            device_ != nullptr ? device_->device() : Device::kCpu,
                            layout_.unit(u).padded_numel};
  }
  return working_view(unit);
}

void ParamCoordinator::release(int u) {
  if (options_.stage < 3) return;
  Unit& unit = units_[static_cast<size_t>(u)];
  ZERO_CHECK(unit.refcount > 0, "release of unit ", u, " that is not acquired");
  unit.refcount -= 1;
  if (unit.refcount > 0 || unit.persistent) return;
  if (reused_soon(u, trace_pos_)) return;
  free_gathered(u);
}

}  // namespace zero::sharding
