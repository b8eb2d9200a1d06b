// Gradient reduction for ZeRO stages 0–3 (see grad_reducer.h): one algorithm over backend
// buffers, streams and events, for host memory and for a device alike.
#include "sharding/grad_reducer.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/check.h"
#include "core/device_memory_budget.h"

namespace zero::sharding {

namespace {
// Elements [offset, offset + numel) of `v`.
TensorView slice(const TensorView& v, int64_t offset, int64_t numel) {
  return TensorView{static_cast<char*>(v.data) + static_cast<size_t>(offset) * dtype_bytes(v.dtype),
                    v.dtype, Shape{numel}, v.device};
}
}  // namespace

GradReducer::GradReducer(const ShardLayout& layout, Communicator& comm, const ZeroOptions& options,
                         MemoryAccounting& memory)
    : GradReducer(layout, comm, options, memory, nullptr) {
  const Status s = allocate();
  ZERO_CHECK(s.ok(), "gradient buffers: ", s.to_string());
}

GradReducer::GradReducer(const ShardLayout& layout, Communicator& comm, const ZeroOptions& options,
                         MemoryAccounting& memory, device::ExecutionContext* device)
    : layout_(layout), comm_(comm), options_(options), memory_(memory) {
  if (device == nullptr) own_host_ = device::ExecutionContext::create_host();
  ctx_ = device != nullptr ? device : own_host_.get();
  on_host_ = options.grads_on_host && options.stage >= 2 && device != nullptr;
  units_.resize(static_cast<size_t>(layout.num_units()));
}

StatusOr<std::unique_ptr<GradReducer>> GradReducer::create(const ShardLayout& layout,
                                                           Communicator& comm,
                                                           const ZeroOptions& options,
                                                           MemoryAccounting& memory,
                                                           device::ExecutionContext* device) {
  std::unique_ptr<GradReducer> r(new GradReducer(layout, comm, options, memory, device));
  ZERO_RETURN_IF_ERROR(r->allocate());
  return r;
}

Status GradReducer::allocate() {
  device::Backend& backend = ctx_->backend();
  if (layout_.world_size() > 1) {
    ZERO_ASSIGN_OR_RETURN(collectives_, device::make_stream_collectives(comm_, *ctx_));
    ready_ = backend.create_event();
  }
  if (on_host_) {
    to_host_stream_ = backend.create_stream("grad_d2h");
    to_host_ready_ = backend.create_event();
    norms_.resize(static_cast<size_t>(layout_.num_units()));
  }
  auto alloc = [&](device::DeviceBuffer& buf, int64_t numel, int u) -> Status {
    // Host gradients: page-locked, so the copies to and from them are asynchronous DMA.
    StatusOr<device::DeviceBuffer> b =
        on_host_ ? backend.allocate_host(DType::kF32, numel) : backend.allocate(DType::kF32, numel);
    if (!b.ok()) return b.status().with_context(fmt::format("gradients of unit {}", u));
    const auto bytes = static_cast<int64_t>(b->view().nbytes());
    memory_.grad_bytes += bytes;
    if (on_host_) {
      memory_.pinned_bytes += bytes;
    } else if (own_host_ == nullptr) {
      memory_.device_bytes += bytes;
    }
    buf = std::move(*b);
    return ok_status();
  };
  for (int u = 0; u < layout_.num_units(); ++u) {
    Unit& unit = units_[static_cast<size_t>(u)];
    const UnitShardInfo& info = layout_.unit(u);
    ZERO_RETURN_IF_ERROR(
        alloc(unit.accum, options_.stage <= 1 ? info.padded_numel : info.shard_numel, u));
    if (options_.stage == 1) ZERO_RETURN_IF_ERROR(alloc(unit.reduced, info.shard_numel, u));
  }
  return ok_status();
}

TensorView GradReducer::view_of(const void* data, DType dtype, int64_t numel) const {
  return TensorView{const_cast<void*>(data), dtype, Shape{numel}, ctx_->device()};
}

TensorView GradReducer::scratch(DType dtype, int64_t numel) {
  device::DeviceBuffer& buf = scratch_[static_cast<size_t>(dtype)];
  if (buf.data() == nullptr) {
    int64_t max_numel = 1;
    for (int u = 0; u < layout_.num_units(); ++u) {
      max_numel = std::max(max_numel, layout_.unit(u).padded_numel);
    }
    StatusOr<device::DeviceBuffer> b = ctx_->backend().allocate(dtype, max_numel);
    if (!b.ok()) exit_out_of_device_memory("the gradient rounding buffer", b.status());
    const auto bytes = static_cast<int64_t>(b->view().nbytes());
    memory_.peak_transient_grad_bytes += bytes;
    if (own_host_ == nullptr) memory_.device_bytes += bytes;
    buf = std::move(*b);
  }
  return view_of(buf.data(), dtype, numel);
}

GradReducer::~GradReducer() {
  // In-flight collectives write into our buffers: finish them first.
  for (auto& b : in_flight_) (void)b.pending.wait();
  // Why a host wait: queued ops (the compute stream's, and the comm stream's work on collective
  // results) may still read or write the buffers freed below (errors are reported by the owner of
  // the stream).
  (void)ctx_->compute().synchronize();
  (void)ctx_->comm().synchronize();
  if (to_host_stream_ != nullptr) (void)to_host_stream_->synchronize();
}

device::DeviceBuffer GradReducer::take(int64_t numel, DType dtype) {
  for (auto it = pool_.begin(); it != pool_.end(); ++it) {
    if (it->numel() == numel && it->view().dtype == dtype) {
      device::DeviceBuffer b = std::move(*it);
      pool_.erase(it);
      return b;
    }
  }
  StatusOr<device::DeviceBuffer> b = ctx_->backend().allocate(dtype, numel);
  if (!b.ok()) {
    exit_out_of_device_memory(
        fmt::format("a gradient bucket buffer ({} x {})", numel, dtype_name(dtype)), b.status());
  }
  const auto bytes = static_cast<int64_t>(b->view().nbytes());
  if (own_host_ == nullptr) memory_.device_bytes += bytes;
  pooled_bytes_ += bytes;
  memory_.peak_transient_grad_bytes = std::max(memory_.peak_transient_grad_bytes, pooled_bytes_);
  return std::move(*b);
}

void GradReducer::give(device::DeviceBuffer b) {
  // Kept, not freed: the sizes recur every micro-step. Given back once its readers are queued on
  // the compute stream, or once the compute stream waits for the bucket's `done` event, so a later
  // user (on the compute stream, or a collective issued after its event) is ordered after them.
  if (b.data() != nullptr) pool_.push_back(std::move(b));
}

void GradReducer::begin_step(int num_micro_steps) {
  num_micro_steps_ = num_micro_steps;
  status_ = Status();
  // A failure of the last step's collectives that finished after its finish_step.
  note_finished_collectives();
  for (auto& u : units_) {
    // Host gradients: the first micro-step that reduces a unit writes its host partition (through
    // a zeroed device buffer: queue_to_host).
    if (!on_host_) ctx_->backend().zero(ctx_->compute(), u.accum.view());
    u.reduced_this_step = false;
    u.host_written = false;
  }
  // Not racing the copy stream's host functions: the last step's norm waited for them.
  for (auto& n : norms_) n = device::SumSquaresOut{};
}

void GradReducer::begin_micro_step(int micro_step) {
  // The previous micro-step's backward is over: its last (partial) bucket goes out now.
  if (options_.stage >= 2) flush_open();
  micro_step_ = micro_step;
}

float* GradReducer::grad_buffer(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  if (unit.in_open) flush_open();
  // A previous micro-step's reduction may still read this unit's buffer.
  if (unit.has_pending) drain_until(u);
  if (unit.micro.data() == nullptr) {
    unit.micro = take(layout_.unit(u).padded_numel, DType::kF32);
    // Zeroed in stream order: after the ops that read it last, before backward accumulates.
    ctx_->backend().zero(ctx_->compute(), unit.micro.view());
  }
  return static_cast<float*>(unit.micro.data());
}

void GradReducer::grad_ready(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  ZERO_CHECK(unit.micro.data() != nullptr, "grad_ready(", u, ") without grad_buffer");
  device::Backend& backend = ctx_->backend();
  device::Stream& stream = ctx_->compute();
  const DType dtype = options_.model_dtype;
  if (options_.stage <= 1) {
    // A 16-bit model's gradient is rounded to its dtype, as its backward would produce it.
    backend.accumulate_rounded(stream, unit.accum.view(), unit.micro.view(), dtype);
    give(std::move(unit.micro));
    // On the last micro-step this unit's gradient is final: with overlap, reduce it right away.
    if (options_.overlap_comm && micro_step_ == num_micro_steps_ - 1) {
      unit.reduced_this_step = true;
      add_to_bucket(u);
    }
    return;
  }
  // Stages 2–3: reduce this micro-step's gradient now; only the own shard is kept. A 16-bit wire of
  // the model dtype rounds the gradient on its way out (nothing reads the fp32 values before), and
  // rounding twice to one dtype equals rounding once, NaNs included: no separate pass then.
  if (options_.comm_dtype != dtype) backend.round_to(stream, unit.micro.view(), dtype);
  add_to_bucket(u);
}

void GradReducer::add_to_bucket(int u) {
  const int64_t numel = layout_.unit(u).padded_numel;
  if (numel >= kAloneNumel) {
    Bucket alone;
    alone.units.push_back(u);
    issue(std::move(alone));
    return;
  }
  if (!open_.empty() && open_numel_ + numel > options_.reduce_bucket_numel) flush_open();
  open_.push_back(u);
  open_numel_ += numel;
  units_[static_cast<size_t>(u)].in_open = true;
  if (open_numel_ >= options_.reduce_bucket_numel) flush_open();
}

void GradReducer::flush_open() {
  if (open_.empty()) return;
  Bucket b;
  b.units = std::move(open_);
  open_.clear();
  open_numel_ = 0;
  for (int u : b.units) units_[static_cast<size_t>(u)].in_open = false;
  issue(std::move(b));
}

void GradReducer::issue(Bucket b) {
  // Stage 1 reduces once per step; stages 2-3 every micro-step, the last one final.
  b.final_for_step =
      options_.stage >= 1 && (options_.stage == 1 || micro_step_ == num_micro_steps_ - 1);
  if (layout_.world_size() == 1) {
    reduce_alone(std::move(b));
  } else {
    issue_collective(std::move(b));
  }
}

TensorView GradReducer::source(int u) const {
  const Unit& unit = units_[static_cast<size_t>(u)];
  return options_.stage <= 1 ? unit.accum.view() : unit.micro.view();
}

void GradReducer::reduce_alone(Bucket b) {
  int64_t padded = 0;
  for (int u : b.units) padded += layout_.unit(u).padded_numel;
  const bool all_reduce = options_.stage == 0 || !options_.reduce_scatter;
  const DType wire = options_.comm_dtype;
  // At world 1 a reduce-scatter's block is the whole bucket (shard_numel == padded_numel).
  comm_.record_elided(all_reduce ? CommKind::kAllReduce : CommKind::kReduceScatter,
                      static_cast<size_t>(padded), wire);
  device::Backend& backend = ctx_->backend();
  device::Stream& stream = ctx_->compute();
  if (on_host_) {
    // The copy stream reads the micro buffers (a 16-bit wire: a pooled rounded copy instead of
    // the shared scratch, which the next unit rewrites) until the bucket is done.
    std::vector<TensorView> parts;
    for (int u : b.units) {
      Unit& unit = units_[static_cast<size_t>(u)];
      TensorView part = unit.micro.view();
      if (wire != DType::kF32) {
        device::DeviceBuffer rounded = take(layout_.unit(u).padded_numel, wire);
        backend.copy(stream, rounded.view(), part);
        part = rounded.view();
        b.micro_held.push_back(std::move(rounded));
      }
      parts.push_back(part);
      b.micro_held.push_back(std::move(unit.micro));
    }
    queue_to_host(b, parts, stream);
    push_in_flight(std::move(b));
    return;
  }
  for (int u : b.units) {
    Unit& unit = units_[static_cast<size_t>(u)];
    const UnitShardInfo& info = layout_.unit(u);
    // What the collective would read, rounded to a 16-bit wire: the sum over one rank is its
    // rounded input, widened again.
    const TensorView src = source(u);
    TensorView result = src;
    if (wire != DType::kF32) {
      result = scratch(wire, info.padded_numel);
      backend.copy(stream, result, src);
    }
    if (options_.stage == 0) {
      if (wire != DType::kF32) backend.copy(stream, src, result);
    } else if (options_.stage == 1) {
      backend.copy(stream, unit.reduced.view(), result);
    } else {
      backend.accumulate(stream, unit.accum.view(), result);
      give(std::move(unit.micro));
    }
    if (b.final_for_step && on_partition_final_) on_partition_final_(u, stream);
  }
}

TensorView GradReducer::pack(Bucket& b, bool rank_major) {
  if (b.units.size() == 1) return source(b.units[0]);  // reduced from its own buffer
  device::Backend& backend = ctx_->backend();
  device::Stream& stream = ctx_->compute();
  int64_t padded = 0;
  for (int u : b.units) padded += layout_.unit(u).padded_numel;
  b.in = take(padded, DType::kF32);
  const TensorView in = b.in.view();
  int64_t off = 0;
  if (rank_major) {
    // Block r is [u1 shard r | u2 shard r | ...].
    for (int r = 0; r < layout_.world_size(); ++r) {
      for (int u : b.units) {
        const int64_t P = layout_.unit(u).shard_numel;
        backend.copy(stream, slice(in, off, P), slice(source(u), r * P, P));
        off += P;
      }
    }
  } else {
    for (int u : b.units) {
      const int64_t n = layout_.unit(u).padded_numel;
      backend.copy(stream, slice(in, off, n), source(u));
      off += n;
    }
  }
  // Stages 2–3 hand the micro buffers back once packed (a later user is queued after the copies).
  if (options_.stage >= 2) {
    for (int u : b.units) give(std::move(units_[static_cast<size_t>(u)].micro));
  }
  return in;
}

void GradReducer::issue_collective(Bucket b) {
  device::Backend& backend = ctx_->backend();
  device::Stream& stream = ctx_->compute();
  const bool single = b.units.size() == 1;
  int64_t padded = 0, shard = 0;
  for (int u : b.units) {
    padded += layout_.unit(u).padded_numel;
    shard += layout_.unit(u).shard_numel;
  }
  const bool all_reduce = options_.stage == 0 || !options_.reduce_scatter;
  const TensorView in = pack(b, /*rank_major=*/!all_reduce);
  // A single unit's own micro buffer is the collective's input: the bucket holds it until done.
  if (single && options_.stage >= 2) {
    b.micro_held.push_back(std::move(units_[static_cast<size_t>(b.units[0])].micro));
  }
  TensorView out;  // reduce-scatter output (fp32)
  if (!all_reduce) {
    if (options_.stage == 1 && single) {
      out = units_[static_cast<size_t>(b.units[0])].reduced.view();
    } else {
      b.out = take(shard, DType::kF32);
      out = b.out.view();
    }
  }
  const DType wire = options_.comm_dtype;
  TensorView send = in, recv = out;
  if (wire != DType::kF32) {
    // A 16-bit wire: the input rounded into wire_in; the result widened into `result` later.
    b.wire_in = take(padded, wire);
    backend.copy(stream, b.wire_in.view(), in);
    send = b.wire_in.view();
    if (!all_reduce) {
      b.wire_out = take(shard, wire);
      recv = b.wire_out.view();
    }
    const TensorView result = all_reduce ? in : out;
    b.result = static_cast<float*>(result.data);
    b.result_numel = result.numel();
  }
  // No host wait: the collective waits for this event, after what the compute stream wrote
  // (backward, the packing and rounding above).
  stream.record(*ready_);
  CollectiveCall call;
  call.dtype = wire;
  call.in = send.data;
  if (all_reduce) {
    call.kind = CommKind::kAllReduce;
    call.out = send.data;
    call.numel = static_cast<size_t>(padded);
  } else {
    call.kind = CommKind::kReduceScatter;
    call.out = recv.data;
    call.numel = static_cast<size_t>(shard);
  }
  device::OrderedCollective c = collectives_->issue(*ready_, {&call, 1});
  b.pending = std::move(c.handle);
  queue_result(b, in, *c.done);
  push_in_flight(std::move(b));
}

void GradReducer::push_in_flight(Bucket b) {
  for (int u : b.units) units_[static_cast<size_t>(u)].has_pending = true;
  in_flight_.push_back(std::move(b));
  // Without overlap_comm a bucket completes as soon as it is issued. Host gradients bound the
  // buckets in flight (their buffers are the gradient's device memory); completing one is the
  // compute stream's wait, not the host's.
  size_t bound = options_.overlap_comm ? in_flight_.size() : 0;
  if (on_host_ && (options_.overlap_comm || layout_.world_size() == 1))
    bound = kHostBucketsInFlight;
  while (in_flight_.size() > bound) complete_front();
}

void GradReducer::queue_to_host(Bucket& b, const std::vector<TensorView>& parts,
                                device::Stream& ready) {
  device::Backend& backend = ctx_->backend();
  device::Stream& copy = *to_host_stream_;
  // No host wait: the copy stream waits for the point of `ready` where the shards are final.
  ready.record(*to_host_ready_);
  copy.wait(*to_host_ready_);
  int64_t numel = 0;
  for (int u : b.units) numel += layout_.unit(u).shard_numel;
  b.to_host = take(numel, DType::kF32);
  int64_t off = 0;
  for (size_t i = 0; i < b.units.size(); ++i) {
    const int u = b.units[i];
    Unit& unit = units_[static_cast<size_t>(u)];
    const int64_t P = layout_.unit(u).shard_numel;
    // (P,) the unit's sum so far on the device: zero, or the host partition copied in (the copy
    // stream wrote it last, so stream order covers the previous micro-step's copy out).
    const TensorView acc = slice(b.to_host.view(), off, P);
    const TensorView host = unit.accum.view();
    if (unit.host_written) {
      backend.transfer(copy, acc, host);
    } else {
      backend.zero(copy, acc);
    }
    unit.host_written = true;
    // The device accumulator's own op and order (zeroed, then += each micro-step): bitwise.
    backend.accumulate(copy, acc, parts[i]);
    if (b.final_for_step) {
      // The norm's part of this unit, over its real elements (global_norm on device partitions).
      backend.sum_squares(copy, slice(acc, 0, layout_.shard_data_numel(u, layout_.rank())),
                          &norms_[static_cast<size_t>(u)]);
    }
    backend.transfer(copy, host, acc);
    // The host partition is final on the copy stream now.
    if (b.final_for_step && on_partition_final_) on_partition_final_(u, copy);
    off += P;
  }
  b.done = backend.create_event();
  copy.record(*b.done);
}

Status GradReducer::wait_host_copies() {
  // Why a host wait: the caller reads the host partitions (the norm's sums, the CPU Adam) next.
  if (to_host_stream_ == nullptr) return ok_status();
  return to_host_stream_->synchronize().with_context("copying gradient partitions to the host");
}

void GradReducer::queue_result(Bucket& b, const TensorView& in,
                               const device::Event& collective_done) {
  // Queued now, on the comm stream behind the collective (issue 10): no host wait for it.
  device::Backend& backend = ctx_->backend();
  device::Stream& stream = ctx_->comm();
  stream.wait(collective_done);
  if (b.result != nullptr) {
    const device::DeviceBuffer& wire = b.wire_out.data() != nullptr ? b.wire_out : b.wire_in;
    backend.copy(stream, view_of(b.result, DType::kF32, b.result_numel),
                 slice(wire.view(), 0, b.result_numel));
  }
  const bool single = b.units.size() == 1;
  const bool all_reduce = options_.stage == 0 || !options_.reduce_scatter;
  int64_t poff = 0, soff = 0;       // offsets of the unit in the packed input / the output
  std::vector<TensorView> to_host;  // host gradients: the units' reduced shards
  for (int u : b.units) {
    const Unit& unit = units_[static_cast<size_t>(u)];
    const UnitShardInfo& info = layout_.unit(u);
    const TensorView accum = unit.accum.view();
    if (options_.stage <= 1) {
      if (all_reduce) {
        if (!single) backend.copy(stream, accum, slice(in, poff, info.padded_numel));
        if (options_.stage == 1) {
          backend.copy(stream, unit.reduced.view(),
                       slice(accum, layout_.shard_begin(u), info.shard_numel));
        }
      } else if (!single) {
        backend.copy(stream, unit.reduced.view(), slice(b.out.view(), soff, info.shard_numel));
      }
    } else {
      const TensorView part = all_reduce
                                  ? slice(in, poff + layout_.shard_begin(u), info.shard_numel)
                                  : slice(b.out.view(), soff, info.shard_numel);
      if (on_host_) {
        to_host.push_back(part);
      } else {
        backend.accumulate(stream, accum, part);
      }
    }
    // `stream` is the comm stream: the partition is final there, not yet on compute.
    if (!on_host_ && b.final_for_step && on_partition_final_) on_partition_final_(u, stream);
    poff += info.padded_numel;
    soff += info.shard_numel;
  }
  if (on_host_) {
    queue_to_host(b, to_host, stream);
    return;
  }
  b.done = backend.create_event();
  stream.record(*b.done);
}

void GradReducer::note_finished_collectives() {
  std::erase_if(unchecked_, [this](const Unchecked& c) {
    if (!c.handle.done()) return false;
    if (Status s = c.handle.wait(); !s.ok() && status_.ok()) status_ = s.with_context(c.what);
    return true;
  });
}

Status GradReducer::wait_collectives() {
  // Why a host wait: the caller waits for the step's scalars next (after these collectives);
  // waiting for the handles first turns a dead peer into their timeout error.
  for (const Unchecked& c : unchecked_) {
    if (Status s = c.handle.wait(); !s.ok() && status_.ok()) status_ = s.with_context(c.what);
  }
  unchecked_.clear();
  return status_;
}

void GradReducer::complete_front() {
  Bucket b = std::move(in_flight_.front());
  in_flight_.pop_front();
  // The compute stream's later work (a pooled buffer reused, the unit's buffer written by the next
  // micro-step, the norm and the update) waits for the bucket. On the host context that is a host
  // wait (the result is consumed or the buffer reused right after this), timed; on a device the
  // stream's, which costs the host nothing.
  const auto t0 = std::chrono::steady_clock::now();
  ctx_->compute().wait(*b.done);
  memory_.comm_wait_s +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int u : b.units) units_[static_cast<size_t>(u)].has_pending = false;
  // The units in issue order: "gradients of unit 3" or "gradients of units 3-5" (a bucket).
  const auto [lo, hi] = std::minmax_element(b.units.begin(), b.units.end());
  std::string what =
      b.units.empty() ? std::string("gradients")
      : b.units.size() == 1
          ? fmt::format("gradients of unit {}", *lo)
          : fmt::format("gradients of units {}-{} (a bucket of {})", *lo, *hi, b.units.size());
  unchecked_.push_back({std::move(b.pending), std::move(what)});
  note_finished_collectives();
  give(std::move(b.in));
  give(std::move(b.out));
  give(std::move(b.wire_in));
  give(std::move(b.wire_out));
  give(std::move(b.to_host));
  for (device::DeviceBuffer& m : b.micro_held) give(std::move(m));
}

void GradReducer::drain_until(int u) {
  // Collectives complete in issue order; completing the FIFO front first keeps that order.
  while (units_[static_cast<size_t>(u)].has_pending && !in_flight_.empty()) complete_front();
}

Status GradReducer::finish_step() {
  if (options_.stage <= 1) {
    for (int u = 0; u < layout_.num_units(); ++u) {
      Unit& unit = units_[static_cast<size_t>(u)];
      if (!unit.reduced_this_step) {
        unit.reduced_this_step = true;
        add_to_bucket(u);
      }
    }
  }
  flush_open();
  while (!in_flight_.empty()) complete_front();
  for (Unit& unit : units_) {
    // Host gradients of a unit no backward wrote this step: zero, as the device accumulator is
    // (no copy of this step writes it; the last step's were waited for by its norm).
    if (on_host_ && !unit.host_written)
      std::memset(unit.accum.data(), 0, unit.accum.view().nbytes());
  }
  return status_;
}

const float* GradReducer::partition(int u) const {
  const Unit& unit = units_[static_cast<size_t>(u)];
  const device::DeviceBuffer& buf = options_.stage == 1 ? unit.reduced : unit.accum;
  return static_cast<const float*>(buf.data());
}

int64_t GradReducer::partition_begin(int u) const {
  return options_.stage == 0 ? 0 : layout_.shard_begin(u);
}

int64_t GradReducer::partition_numel(int u) const {
  return options_.stage == 0 ? layout_.unit(u).padded_numel : layout_.unit(u).shard_numel;
}

}  // namespace zero::sharding
