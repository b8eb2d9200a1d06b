// Parameter residency under ZeRO stages 0–3 (see param_coordinator.h): one algorithm over backend
// buffers, streams and events, for host memory and for a device alike.
#include "sharding/param_coordinator.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"
#include "core/device_memory_budget.h"

namespace zero::sharding {

ParamCoordinator::ParamCoordinator(const ShardLayout& layout, Communicator& comm,
                                   const ZeroOptions& options, MemoryAccounting& memory,
                                   device::ExecutionContext* device)
    : layout_(layout), comm_(comm), options_(options), memory_(memory) {
  if (device == nullptr) own_host_ = device::ExecutionContext::create_host();
  ctx_ = device != nullptr ? device : own_host_.get();
  units_.resize(static_cast<size_t>(layout.num_units()));
  if (options_.stage < 3) return;
  // Small units stay gathered (DeepSpeed's persistence thresholds, applied per unit).
  int64_t persistent_numel = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    const UnitShardInfo& info = layout.unit(u);
    if (info.numel <= options_.param_persistence_threshold_numel &&
        persistent_numel + info.numel <= options_.model_persistence_threshold_numel) {
      units_[static_cast<size_t>(u)].persistent = true;
      persistent_numel += info.numel;
    }
  }
}

int64_t planned_gathered_numel(const ShardLayout& layout, int64_t prefetch_bucket_numel) {
  int64_t sum_padded = 0, max_padded = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    sum_padded += layout.unit(u).padded_numel;
    max_padded = std::max(max_padded, layout.unit(u).padded_numel);
  }
  return std::min(sum_padded, 2 * max_padded + std::min(prefetch_bucket_numel, sum_padded));
}

StatusOr<std::unique_ptr<ParamCoordinator>> ParamCoordinator::create(
    const ShardLayout& layout, Communicator& comm, const ZeroOptions& options,
    const ParamOffloadOptions& offload, MemoryAccounting& memory,
    device::ExecutionContext* device) {
  ZERO_CHECK(device == nullptr || offload.device == ParamOffload::kNone || options.stage == 3,
             "parameter offload on a device below stage 3");
  std::unique_ptr<ParamCoordinator> c(new ParamCoordinator(layout, comm, options, memory, device));
  ZERO_RETURN_IF_ERROR(c->allocate(offload));
  return c;
}

Status ParamCoordinator::allocate(const ParamOffloadOptions& offload) {
  device::Backend& backend = ctx_->backend();
  const bool on_host = own_host_ != nullptr;
  upload_ = !on_host && options_.stage == 3 && offload.device != ParamOffload::kNone;
  if (options_.stage == 3 && (on_host || upload_)) {
    std::vector<bool> persistent;
    for (const Unit& u : units_) persistent.push_back(u.persistent);
    // On a device the shards are its backend's host memory: page-locked, so the copies to the
    // device read them where they are.
    ZERO_ASSIGN_OR_RETURN(
        store_, ParamStore::create(layout_, offload, persistent, options_.model_dtype, comm_.rank(),
                                   memory_, upload_ ? &backend : nullptr));
    if (upload_) {
      copy_ = backend.create_stream("param_copy");
      compute_mark_ = backend.create_event();
    }
  } else {
    for (int u = 0; u < layout_.num_units(); ++u) {
      // Stages 0-2: the full unit; stage 3 on a device: the shard (the padded unit at world 1).
      const int64_t numel =
          options_.stage == 3 ? layout_.unit(u).shard_numel : layout_.unit(u).padded_numel;
      StatusOr<device::DeviceBuffer> buf = backend.allocate(options_.model_dtype, numel);
      if (!buf.ok()) return buf.status().with_context(fmt::format("parameters of unit {}", u));
      const auto bytes = static_cast<int64_t>(buf->view().nbytes());
      memory_.param_bytes += bytes;
      if (!on_host) memory_.device_bytes += bytes;
      // Zeroed once: values before the first set_values are zeros, never stale memory.
      backend.zero(ctx_->compute(), buf->view());
      Unit& unit = units_[static_cast<size_t>(u)];
      (options_.stage == 3 ? unit.shard : unit.full) = std::move(*buf);
    }
  }
  if (layout_.world_size() > 1) {
    ZERO_ASSIGN_OR_RETURN(collectives_, device::make_stream_collectives(comm_, *ctx_));
    ready_ = backend.create_event();
  }
  return ok_status();
}

ParamCoordinator::~ParamCoordinator() {
  // Outstanding gathers write into our buffers: let them finish before the buffers go away.
  for (auto& u : units_) {
    if (u.has_pending) (void)u.pending.wait();
  }
  // Why a host wait: queued kernels (and, on the comm stream, gathers; on the copy stream, shard
  // copies) may still read or write the units and host shards freed below (errors are reported by
  // the owner of the stream, or were by finish_updates).
  (void)ctx_->compute().synchronize();
  (void)ctx_->comm().synchronize();
  if (copy_ != nullptr) (void)copy_->synchronize();
}

void ParamCoordinator::note_status(const Status& s) {
  if (!s.ok() && status_.ok()) status_ = s;
}

const Status& ParamCoordinator::status() {
  std::erase_if(unchecked_, [this](const Unchecked& c) {
    if (!c.handle.done()) return false;
    note_status(c.handle.wait().with_context(fmt::format("parameters of unit {}", c.unit)));
    return true;
  });
  return status_;
}

TensorView ParamCoordinator::view_of(const void* data, int64_t numel) const {
  return TensorView{const_cast<void*>(data), options_.model_dtype, Shape{numel}, ctx_->device()};
}

Status ParamCoordinator::set_values(int u, const float* values) {
  return install(u, values, DType::kF32);
}

Status ParamCoordinator::set_model_dtype_values(int u, const void* values) {
  ZERO_CHECK(own_host_ == nullptr, "set_model_dtype_values of unit ", u,
             ": only for a coordinator on a device");
  return install(u, values, options_.model_dtype);
}

Status ParamCoordinator::install(int u, const void* values, DType values_dtype) {
  Unit& unit = units_[static_cast<size_t>(u)];
  const UnitShardInfo& info = layout_.unit(u);
  if (unit.has_pending) wait_pending(u);
  if (upload_) {
    // Offloaded shards: the device's values go to the host shard (copied on the copy stream).
    ZERO_RETURN_IF_ERROR(download_shard(u, values, values_dtype));
  } else if (store_ != nullptr) {
    // Stage 3 on the host: the store rounds the shard into host memory (or writes it to NVMe).
    ZERO_RETURN_IF_ERROR(store_->write(u, static_cast<const float*>(values)));
  } else {
    // The partition: the whole padded unit at stage 0 (and at any stage in a world of one), the
    // own block at stages 1-2, the shard at stage 3. Rounded to the model dtype
    // (round-to-nearest-even, bitwise core/dtype.h; values already in the model dtype are copied
    // as they are), queued on the compute stream after the update that wrote `values` and before
    // the kernels that read the unit.
    const bool whole = options_.stage == 0 || layout_.world_size() == 1;
    const int64_t numel = whole ? info.padded_numel : info.shard_numel;
    void* dst = options_.stage == 3 ? unit.shard.data() : whole ? unit.full.data() : own_block(u);
    ctx_->backend().copy(
        ctx_->compute(), view_of(dst, numel),
        TensorView{const_cast<void*>(values), values_dtype, Shape{numel}, ctx_->device()});
  }
  if (options_.stage == 3) return after_shard_install(u);
  if (options_.stage >= 1 && layout_.world_size() == 1) {
    // A world of one: the unit is its own gather (counted as one elided collective).
    const CommKind kind =
        options_.allgather_partitions ? CommKind::kAllGather : CommKind::kBroadcast;
    comm_.record_elided(kind, static_cast<size_t>(info.shard_numel), options_.model_dtype);
  } else if (options_.stage >= 1) {
    // Stages 1–2: make the full unit current on every rank. No host wait: the gather waits for an
    // event after the cast above (issue_gather).
    issue_gather(u, nullptr);
    if (!options_.overlap_comm) wait_pending(u);
  }
  return status_;
}

Status ParamCoordinator::after_shard_install(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  // Gathered copies now hold old values: drop them (persistent ones are gathered again on use).
  // A lent shard (world of one) is returned even when persistent: it is lent again on use.
  if (unit.view != nullptr || (unit.gathered && !unit.persistent)) free_gathered(u);
  unit.gathered = false;
  // The next forward starts with this unit: its gather runs beside the update of the units after
  // it (the shard is written on the compute stream, or copied to the host on the copy stream the
  // upload also runs on: the gather is ordered after it), instead of blocking the first acquire of
  // the step.
  if (leads_trace(u)) gather_async(u);
  return status_;
}

Status ParamCoordinator::finish_updates() {
  if (upload_) {
    // Why a host wait: a failed shard copy is this update's error (the copy stream has no other
    // host sync); it waits for the last copies to the host and the first uploads of the next
    // forward (leads_trace), a small part of the step.
    note_status(copy_->synchronize().with_context("copying parameter shards"));
    drop_uploaded(/*all=*/false);
  }
  // Stage 3's gathers issued by set_values are prefetches: acquire() waits for them.
  if (options_.stage == 3) return status_;
  for (int u = 0; u < layout_.num_units(); ++u) {
    if (units_[static_cast<size_t>(u)].has_pending) wait_pending(u);
  }
  return status();
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
  // The compute stream's later work (the model reading the unit, a cast into it, the next gather
  // reusing its buffer) waits for the gather. On the host context a host wait (the buffer is about
  // to be read or rewritten: the gather must land), timed; on a device the stream's.
  const auto t0 = std::chrono::steady_clock::now();
  if (unit.done != nullptr) ctx_->compute().wait(*unit.done);
  memory_.comm_wait_s +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  unit.done = nullptr;
  unchecked_.push_back({std::move(unit.pending), u});
  unit.has_pending = false;
  // On the host context the gather has now consumed the shard: an NVMe shard's host copy can go,
  // and its result is known. (Offloaded shards on a device: the copy may still run; see
  // drop_uploaded.)
  if (store_ != nullptr && !upload_) {
    store_->drop(u);
    (void)status();
  }
}

bool ParamCoordinator::gather_is_view(int u) const {
  return layout_.world_size() == 1 && !upload_ && (store_ == nullptr || !store_->on_nvme(u));
}

StatusOr<const void*> ParamCoordinator::load_shard(int u) {
  if (store_ != nullptr) return store_->load(u);
  return static_cast<const void*>(units_[static_cast<size_t>(u)].shard.data());
}

void ParamCoordinator::gather_async(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  const UnitShardInfo& info = layout_.unit(u);
  if (gather_is_view(u)) {
    // A world of one: the shard is the unit. Counted as a gathered unit and a gather (the model
    // holds it just the same), so the live limits and the counters are those of any world size.
    // The device shard, or the host shard (never fails, never blocks).
    StatusOr<const void*> shard = load_shard(u);
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
  if (unit.full.data() == nullptr) {
    for (auto it = pool_.begin(); it != pool_.end(); ++it) {
      if (it->numel() == info.padded_numel) {
        unit.full = std::move(*it);
        pool_.erase(it);
        break;
      }
    }
    if (unit.full.data() == nullptr) {
      StatusOr<device::DeviceBuffer> b =
          ctx_->backend().allocate(options_.model_dtype, info.padded_numel);
      if (!b.ok()) {
        // The plan's figure is for all gathered units together (a unit's own is what it asks).
        const auto elem = static_cast<int64_t>(dtype_bytes(options_.model_dtype));
        exit_out_of_device_memory(
            fmt::format("the gather buffer of unit {} (stage 3; gathered units already hold {} "
                        "bytes, the memory plan counts {} bytes for them at once)",
                        u, live_gathered_numel_ * elem,
                        planned_gathered_numel(layout_, options_.prefetch_bucket_numel) * elem),
            b.status());
      }
      if (own_host_ == nullptr) memory_.device_bytes += static_cast<int64_t>(b->view().nbytes());
      unit.full = std::move(*b);
    }
    live_gathered_numel_ += info.padded_numel;
    live_gathered_units_ += 1;
    note_peak_gathered();
    trim_pool();
  }
  unit.gathered = true;
  unit.gathers += 1;
  if (upload_) {
    upload_and_gather(u);
    return;
  }
  // An NVMe shard is read (or its read-ahead completed) here; on an I/O error the gather still
  // runs on whatever is there so every rank issues the same collectives, and the error surfaces
  // through status() after the micro-step.
  StatusOr<const void*> shard = load_shard(u);
  if (!shard.ok()) note_status(shard.status());
  issue_gather(u, shard.ok() ? *shard : nullptr);
}

char* ParamCoordinator::own_block(int u) const {
  return static_cast<char*>(units_[static_cast<size_t>(u)].full.data()) +
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

void ParamCoordinator::issue_gather(int u, const void* shard, const device::Event* ready) {
  Unit& unit = units_[static_cast<size_t>(u)];
  const int64_t P = layout_.unit(u).shard_numel;
  const DType dtype = options_.model_dtype;
  device::Backend& backend = ctx_->backend();
  device::Stream& stream = ctx_->compute();
  char* base = static_cast<char*>(unit.full.data());  // the buffer the collective fills
  if (layout_.world_size() == 1) {
    // A world of one gathers only an NVMe shard (the others are lent): the copy is the gather.
    backend.copy(stream, view_of(base, P), view_of(shard != nullptr ? shard : base, P));
    const CommKind kind =
        options_.allgather_partitions ? CommKind::kAllGather : CommKind::kBroadcast;
    comm_.record_elided(kind, static_cast<size_t>(P), dtype);
    if (store_ != nullptr) store_->drop(u);  // the inline copy has consumed it
    return;
  }
  const void* in = own_block(u);
  if (shard != nullptr) {
    if (options_.allgather_partitions) {
      in = shard;  // the shard is in the model dtype: the all-gather reads it where it is
    } else {
      // Owner broadcasts send from the unit's own block (on the compute stream: the broadcasts
      // wait for an event after it).
      backend.copy(stream, view_of(own_block(u), P), view_of(shard, P));
    }
  }
  std::vector<CollectiveCall> calls;
  if (options_.allgather_partitions) {
    calls.push_back(
        {CommKind::kAllGather, ReduceOp::kSum, dtype, in, base, static_cast<size_t>(P), 0});
  } else {
    // DeepSpeed's allgather_partitions=false: every owner broadcasts its shard, as one group per
    // unit (ncclGroupStart/End), completing as one.
    for (int r = 0; r < layout_.world_size(); ++r) {
      char* block = base + static_cast<size_t>(layout_.shard_begin(u, r)) * dtype_bytes(dtype);
      calls.push_back(
          {CommKind::kBroadcast, ReduceOp::kSum, dtype, block, block, static_cast<size_t>(P), r});
    }
  }
  // No host wait: the gather waits for this event, after everything queued on the compute stream
  // so far (the cast that wrote the own block or shard, kernels still reading a reused buffer), or
  // for the caller's (after an upload that itself waited for the compute stream).
  if (ready == nullptr) {
    stream.record(*ready_);
    ready = ready_.get();
  }
  device::OrderedCollective c = collectives_->issue(*ready, calls);
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
  if (unit.full.data() == nullptr) return;
  live_gathered_numel_ -= unit.full.numel();
  live_gathered_units_ -= 1;
  // Kept for the next gather of this size; reused in stream order (the next gather waits for an
  // event after the kernels that read it last).
  pool_.push_back(std::move(unit.full));
  unit.gathered = false;
  trim_pool();
}

void ParamCoordinator::trim_pool() {
  int64_t kept = 0;
  for (const device::DeviceBuffer& b : pool_) kept += b.numel();
  const int64_t budget = std::max<int64_t>(0, options_.max_live_numel - live_gathered_numel_);
  if (kept <= budget && pool_.size() <= units_.size()) return;
  // Why a host wait: queued kernels may still read the buffers freed below (and a gather that
  // wrote one last is covered: the compute stream waited for it before the buffer was pooled).
  // On the host context the compute stream is the caller's own: nothing is pending.
  note_status(ctx_->compute().synchronize());
  while (!pool_.empty() && (kept > budget || pool_.size() > units_.size())) {
    kept -= pool_.front().numel();
    if (own_host_ == nullptr) {
      memory_.device_bytes -= static_cast<int64_t>(pool_.front().view().nbytes());
    }
    pool_.erase(pool_.begin());
  }
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
  return model::ParamView{unit.full.data(), options_.model_dtype, ctx_->device(),
                          unit.full.numel()};
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
    return model::ParamView{unit.view, options_.model_dtype, ctx_->device(),
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
