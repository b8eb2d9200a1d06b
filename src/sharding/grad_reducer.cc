// Gradient reduction for ZeRO stages 0–3 (see grad_reducer.h).
#include "sharding/grad_reducer.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/check.h"
#include "kernels/elementwise/elementwise.h"

namespace zero::sharding {

namespace {
void zero_fill(Tensor& t) { std::memset(t.data(), 0, t.nbytes()); }
}  // namespace

GradReducer::GradReducer(const ShardLayout& layout, Communicator& comm, const ZeroOptions& options,
                         MemoryAccounting& memory)
    : GradReducer(layout, comm, options, memory, nullptr) {}

GradReducer::GradReducer(const ShardLayout& layout, Communicator& comm, const ZeroOptions& options,
                         MemoryAccounting& memory, device::ExecutionContext* device)
    : layout_(layout), comm_(comm), options_(options), memory_(memory), device_(device) {
  units_.resize(static_cast<size_t>(layout.num_units()));
  if (device_ != nullptr) return;  // allocate_on_device()
  for (int u = 0; u < layout.num_units(); ++u) {
    Unit& unit = units_[static_cast<size_t>(u)];
    const UnitShardInfo& info = layout.unit(u);
    if (options_.stage <= 1) {
      unit.accum = Tensor(Shape{info.padded_numel});
      if (options_.stage == 1) unit.reduced = Tensor(Shape{info.shard_numel});
    } else {
      unit.accum = Tensor(Shape{info.shard_numel});
    }
    memory_.grad_bytes += static_cast<int64_t>(unit.accum.nbytes() + unit.reduced.nbytes());
  }
}

StatusOr<std::unique_ptr<GradReducer>> GradReducer::create(const ShardLayout& layout,
                                                           Communicator& comm,
                                                           const ZeroOptions& options,
                                                           MemoryAccounting& memory,
                                                           device::ExecutionContext* device) {
  std::unique_ptr<GradReducer> r(new GradReducer(layout, comm, options, memory, device));
  if (device != nullptr) ZERO_RETURN_IF_ERROR(r->allocate_on_device());
  return r;
}

Status GradReducer::allocate_on_device() {
  device::Backend& backend = device_->backend();
  if (layout_.world_size() > 1) {
    ZERO_ASSIGN_OR_RETURN(collectives_, device::make_stream_collectives(comm_, *device_));
    ready_ = backend.create_event();
  }
  int64_t bytes = 0;
  auto alloc = [&](device::DeviceBuffer& buf, int64_t numel, int u) -> Status {
    StatusOr<device::DeviceBuffer> b = backend.allocate(DType::kF32, numel);
    if (!b.ok()) return b.status().with_context(fmt::format("gradients of unit {}", u));
    bytes += static_cast<int64_t>(b->view().nbytes());
    buf = std::move(*b);
    return ok_status();
  };
  for (int u = 0; u < layout_.num_units(); ++u) {
    Unit& unit = units_[static_cast<size_t>(u)];
    const UnitShardInfo& info = layout_.unit(u);
    const int64_t before = bytes;
    ZERO_RETURN_IF_ERROR(
        alloc(unit.accum_dev, options_.stage <= 1 ? info.padded_numel : info.shard_numel, u));
    if (options_.stage == 1) ZERO_RETURN_IF_ERROR(alloc(unit.reduced_dev, info.shard_numel, u));
    memory_.grad_bytes += bytes - before;
    // Each unit keeps its micro-step buffer: every unit is written every micro-step, and freeing
    // device memory would wait for the device.
    ZERO_RETURN_IF_ERROR(alloc(unit.micro_dev, info.padded_numel, u));
  }
  memory_.device_bytes += bytes;
  return ok_status();
}

TensorView GradReducer::device_view(const void* data, DType dtype, int64_t numel) const {
  return TensorView{const_cast<void*>(data), dtype, Shape{numel}, device_->device()};
}

TensorView GradReducer::device_scratch(DType dtype, int64_t numel) {
  device::DeviceBuffer& buf = scratch_[static_cast<size_t>(dtype)];
  if (buf.data() == nullptr) {
    int64_t max_numel = 1;
    for (int u = 0; u < layout_.num_units(); ++u) {
      max_numel = std::max(max_numel, layout_.unit(u).padded_numel);
    }
    StatusOr<device::DeviceBuffer> b = device_->backend().allocate(dtype, max_numel);
    ZERO_CHECK(b.ok(), "gradient rounding buffer: ", b.status().to_string());
    memory_.peak_transient_grad_bytes += static_cast<int64_t>(b->view().nbytes());
    memory_.device_bytes += static_cast<int64_t>(b->view().nbytes());
    buf = std::move(*b);
  }
  return device_view(buf.data(), dtype, numel);
}

GradReducer::~GradReducer() {
  // In-flight collectives write into our buffers: finish them first.
  for (auto& b : in_flight_) (void)b.pending.wait();
  // Why a host wait: queued ops (the compute stream's, and the comm stream's work on collective
  // results) may still read or write the device buffers freed below (errors are reported by the
  // owner of the stream).
  if (device_ != nullptr) {
    (void)device_->compute().synchronize();
    (void)device_->comm().synchronize();
  }
}

Tensor GradReducer::take_buffer(int64_t numel, DType dtype, bool zeroed) {
  transient_bytes_ += numel * static_cast<int64_t>(dtype_bytes(dtype));
  memory_.peak_transient_grad_bytes = std::max(memory_.peak_transient_grad_bytes, transient_bytes_);
  return pool_.take(numel, dtype, zeroed);
}

void GradReducer::give_buffer(Tensor t) {
  transient_bytes_ -= static_cast<int64_t>(t.nbytes());
  pool_.give(std::move(t));
}

void GradReducer::begin_step(int num_micro_steps) {
  num_micro_steps_ = num_micro_steps;
  status_ = Status();
  // A failure of the last step's collectives that finished after its finish_step.
  note_finished_collectives();
  for (auto& u : units_) {
    if (device_ != nullptr) {
      device_->backend().zero(device_->compute(), u.accum_dev.view());
    } else {
      zero_fill(u.accum);
    }
    u.reduced_this_step = false;
  }
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
  if (device_ != nullptr) {
    if (!unit.micro_open) {
      // Zeroed in stream order: after the ops that read it last, before backward accumulates.
      device_->backend().zero(device_->compute(), unit.micro_dev.view());
      unit.micro_open = true;
    }
    return static_cast<float*>(unit.micro_dev.data());
  }
  if (unit.micro.empty()) {
    unit.micro = take_buffer(layout_.unit(u).padded_numel, DType::kF32, /*zeroed=*/true);
  }
  return unit.micro.f32();
}

void GradReducer::grad_ready(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  const UnitShardInfo& info = layout_.unit(u);
  const DType dtype = options_.model_dtype;
  if (device_ != nullptr) {
    ZERO_CHECK(unit.micro_open, "grad_ready(", u, ") without grad_buffer");
    device::Backend& backend = device_->backend();
    device::Stream& stream = device_->compute();
    const TensorView micro = unit.micro_dev.view();
    // A 16-bit model's gradient is rounded to its dtype, as its backward would produce it (into
    // the scratch; accumulate widens it again), unless a wire of that dtype rounds it later.
    const bool round =
        dtype != DType::kF32 && (options_.stage <= 1 || options_.comm_dtype != dtype);
    TensorView grad = micro;
    if (round) {
      grad = device_scratch(dtype, info.padded_numel);
      backend.copy(stream, grad, micro);
    }
    if (options_.stage <= 1) {
      backend.accumulate(stream, unit.accum_dev.view(), grad);
      unit.micro_open = false;
      if (options_.overlap_comm && micro_step_ == num_micro_steps_ - 1) {
        unit.reduced_this_step = true;
        add_to_bucket(u);
      }
      return;
    }
    if (round) backend.copy(stream, micro, grad);
    add_to_bucket(u);
    return;
  }
  float* micro = unit.micro.f32();
  if (options_.stage <= 1) {
    kernels::cpu::accumulate_rounded(unit.accum.f32(), micro, dtype, info.padded_numel);
    give_buffer(std::move(unit.micro));
    unit.micro = Tensor();
    // On the last micro-step this unit's gradient is final: with overlap, reduce it right away.
    if (options_.overlap_comm && micro_step_ == num_micro_steps_ - 1) {
      unit.reduced_this_step = true;
      add_to_bucket(u);
    }
    return;
  }
  // Stages 2–3: reduce this micro-step's gradient now; only the own shard is kept. A 16-bit wire of
  // the model dtype rounds the gradient on its way out (issue() casts it; nothing reads the fp32
  // values before), and rounding twice to one dtype equals rounding once, NaNs included: no
  // separate pass then.
  const bool wire_rounds = options_.comm_dtype == dtype;
  if (dtype != DType::kF32 && !wire_rounds) {
    kernels::cpu::round_to_dtype(micro, micro, dtype, info.padded_numel);
  }
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
  const int world = layout_.world_size();
  if (device_ != nullptr) {
    // Stage 1 reduces once per step; stages 2-3 every micro-step, the last one final.
    b.final_for_step =
        options_.stage >= 1 && (options_.stage == 1 || micro_step_ == num_micro_steps_ - 1);
    if (world == 1) {
      reduce_alone_on_device(b);
    } else {
      issue_on_device(std::move(b));
    }
    return;
  }
  if (world == 1 && options_.comm_dtype == DType::kF32) {
    reduce_alone(b);
    return;
  }
  issue_on_host(std::move(b));
}

float* GradReducer::pack_on_host(Bucket& b, bool rank_major) {
  // The unit's buffer the collective reads: the micro-step gradient (stages 2–3) or the
  // accumulator (stages 0–1).
  auto src = [&](int u) -> float* {
    Unit& unit = units_[static_cast<size_t>(u)];
    return options_.stage <= 1 ? unit.accum.f32() : unit.micro.f32();
  };
  if (b.units.size() == 1) return src(b.units[0]);  // reduced from its own buffer
  int64_t padded = 0;
  for (int u : b.units) padded += layout_.unit(u).padded_numel;
  b.in = take_buffer(padded);
  float* dst = b.in.f32();
  if (rank_major) {
    // Block r is [u1 shard r | u2 shard r | ...].
    for (int r = 0; r < layout_.world_size(); ++r) {
      for (int u : b.units) {
        const int64_t P = layout_.unit(u).shard_numel;
        std::memcpy(dst, src(u) + static_cast<int64_t>(r) * P, static_cast<size_t>(P) * 4);
        dst += P;
      }
    }
  } else {
    for (int u : b.units) {
      const int64_t n = layout_.unit(u).padded_numel;
      std::memcpy(dst, src(u), static_cast<size_t>(n) * 4);
      dst += n;
    }
  }
  // Stages 2–3 hand the micro buffers back once packed.
  if (options_.stage >= 2) {
    for (int u : b.units) {
      Unit& unit = units_[static_cast<size_t>(u)];
      give_buffer(std::move(unit.micro));
      unit.micro = Tensor();
    }
  }
  return b.in.f32();
}

void GradReducer::issue_on_host(Bucket b) {
  int64_t padded = 0, shard = 0;
  for (int u : b.units) {
    padded += layout_.unit(u).padded_numel;
    shard += layout_.unit(u).shard_numel;
  }
  const DType wire = options_.comm_dtype;
  const bool all_reduce = options_.stage == 0 || !options_.reduce_scatter;
  float* in = pack_on_host(b, /*rank_major=*/!all_reduce);
  // A 16-bit wire: the input rounded into wire_in; the result widened into `result` at completion.
  if (wire != DType::kF32) {
    b.wire_in = take_buffer(padded, wire);
    kernels::cpu::cast_from_f32(in, b.wire_in.data(), wire, padded);
  }
  if (all_reduce) {
    if (wire == DType::kF32) {
      b.pending = comm_.all_reduce_async(in, static_cast<size_t>(padded), wire, ReduceOp::kSum);
    } else {
      b.result = in;
      b.result_numel = padded;
      b.pending = comm_.all_reduce_async(b.wire_in.data(), static_cast<size_t>(padded), wire,
                                         ReduceOp::kSum);
    }
  } else {
    float* out = nullptr;
    if (options_.stage == 1 && b.units.size() == 1) {
      out = units_[static_cast<size_t>(b.units[0])].reduced.f32();
    } else {
      b.out = take_buffer(shard);
      out = b.out.f32();
    }
    if (wire == DType::kF32) {
      b.pending = comm_.reduce_scatter_async(in, out, static_cast<size_t>(shard), wire);
    } else {
      b.wire_out = take_buffer(shard, wire);
      b.result = out;
      b.result_numel = shard;
      b.pending = comm_.reduce_scatter_async(b.wire_in.data(), b.wire_out.data(),
                                             static_cast<size_t>(shard), wire);
    }
  }
  for (int u : b.units) units_[static_cast<size_t>(u)].has_pending = true;
  in_flight_.push_back(std::move(b));
  if (!options_.overlap_comm) complete_front();
}

void GradReducer::reduce_alone(const Bucket& b) {
  int64_t padded = 0;
  for (int u : b.units) padded += layout_.unit(u).padded_numel;
  const bool all_reduce = options_.stage == 0 || !options_.reduce_scatter;
  // At world 1 a reduce-scatter's block is the whole bucket (shard_numel == padded_numel).
  comm_.record_elided(all_reduce ? CommKind::kAllReduce : CommKind::kReduceScatter,
                      static_cast<size_t>(padded), DType::kF32);
  for (int u : b.units) {
    Unit& unit = units_[static_cast<size_t>(u)];
    const UnitShardInfo& info = layout_.unit(u);
    if (options_.stage == 1) {
      std::memcpy(unit.reduced.f32(), unit.accum.f32(), unit.reduced.nbytes());
    } else if (options_.stage >= 2) {
      const float* micro = unit.micro.f32();
      float* acc = unit.accum.f32();
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < info.shard_numel; ++i) acc[i] += micro[i];
      give_buffer(std::move(unit.micro));
      unit.micro = Tensor();
    }
  }
}

void GradReducer::reduce_alone_on_device(const Bucket& b) {
  int64_t padded = 0;
  for (int u : b.units) padded += layout_.unit(u).padded_numel;
  const bool all_reduce = options_.stage == 0 || !options_.reduce_scatter;
  const DType wire = options_.comm_dtype;
  comm_.record_elided(all_reduce ? CommKind::kAllReduce : CommKind::kReduceScatter,
                      static_cast<size_t>(padded), wire);
  device::Backend& backend = device_->backend();
  device::Stream& stream = device_->compute();
  for (int u : b.units) {
    Unit& unit = units_[static_cast<size_t>(u)];
    const UnitShardInfo& info = layout_.unit(u);
    // What the collective reads (stages 0-1: the accumulator; 2-3: this micro-step's gradient),
    // rounded to a 16-bit wire: the sum over one rank is its rounded input, widened again.
    const TensorView src = options_.stage <= 1 ? unit.accum_dev.view() : unit.micro_dev.view();
    TensorView result = src;
    if (wire != DType::kF32) {
      result = device_scratch(wire, info.padded_numel);
      backend.copy(stream, result, src);
    }
    if (options_.stage == 0) {
      if (wire != DType::kF32) backend.copy(stream, src, result);
    } else if (options_.stage == 1) {
      backend.copy(stream, unit.reduced_dev.view(), result);
    } else {
      backend.accumulate(stream, unit.accum_dev.view(), result);
      unit.micro_open = false;
    }
    if (b.final_for_step && on_partition_final_) on_partition_final_(u, stream);
  }
}

device::DeviceBuffer GradReducer::take_device(int64_t numel, DType dtype) {
  for (auto it = device_pool_.begin(); it != device_pool_.end(); ++it) {
    if (it->numel() == numel && it->view().dtype == dtype) {
      device::DeviceBuffer b = std::move(*it);
      device_pool_.erase(it);
      return b;
    }
  }
  StatusOr<device::DeviceBuffer> b = device_->backend().allocate(dtype, numel);
  ZERO_CHECK(b.ok(), "gradient bucket buffer: ", b.status().to_string());
  memory_.device_bytes += static_cast<int64_t>(b->view().nbytes());
  transient_bytes_ += static_cast<int64_t>(b->view().nbytes());
  memory_.peak_transient_grad_bytes = std::max(memory_.peak_transient_grad_bytes, transient_bytes_);
  return std::move(*b);
}

void GradReducer::give_device(device::DeviceBuffer b) {
  // Kept, not freed: the sizes recur every micro-step. Given back once the compute stream waits
  // for the bucket's `done` event, so a later user is ordered after the collective and the work
  // on its result: packing on the compute stream, or a collective issued after its event.
  if (b.data() != nullptr) device_pool_.push_back(std::move(b));
}

namespace {
// Elements [offset, offset + numel) of `v`.
TensorView slice(const TensorView& v, int64_t offset, int64_t numel) {
  return TensorView{static_cast<char*>(v.data) + static_cast<size_t>(offset) * dtype_bytes(v.dtype),
                    v.dtype, Shape{numel}, v.device};
}
}  // namespace

void GradReducer::issue_on_device(Bucket b) {
  const int world = layout_.world_size();
  device::Backend& backend = device_->backend();
  device::Stream& stream = device_->compute();
  const bool single = b.units.size() == 1;
  int64_t padded = 0, shard = 0;
  for (int u : b.units) {
    padded += layout_.unit(u).padded_numel;
    shard += layout_.unit(u).shard_numel;
  }
  auto src = [&](int u) {
    const Unit& unit = units_[static_cast<size_t>(u)];
    return options_.stage <= 1 ? unit.accum_dev.view() : unit.micro_dev.view();
  };
  const bool all_reduce = options_.stage == 0 || !options_.reduce_scatter;
  TensorView in = single ? src(b.units[0]) : TensorView{};
  if (!single) {
    b.in_dev = take_device(padded, DType::kF32);
    in = b.in_dev.view();
    int64_t off = 0;
    if (all_reduce) {
      for (int u : b.units) {
        const int64_t n = layout_.unit(u).padded_numel;
        backend.copy(stream, slice(in, off, n), src(u));
        off += n;
      }
    } else {
      // Rank-major: block r is [u1 shard r | u2 shard r | ...].
      for (int r = 0; r < world; ++r) {
        for (int u : b.units) {
          const int64_t P = layout_.unit(u).shard_numel;
          backend.copy(stream, slice(in, off, P), slice(src(u), r * P, P));
          off += P;
        }
      }
    }
    // Packed: the micro buffers are free for the next micro-step (its zeroing is queued after).
    if (options_.stage >= 2) {
      for (int u : b.units) units_[static_cast<size_t>(u)].micro_open = false;
    }
  }
  TensorView out;  // reduce-scatter output (fp32)
  if (!all_reduce) {
    if (options_.stage == 1 && single) {
      out = units_[static_cast<size_t>(b.units[0])].reduced_dev.view();
    } else {
      b.out_dev = take_device(shard, DType::kF32);
      out = b.out_dev.view();
    }
  }
  const DType wire = options_.comm_dtype;
  TensorView send = in, recv = out;
  if (wire != DType::kF32) {
    b.wire_in_dev = take_device(padded, wire);
    backend.copy(stream, b.wire_in_dev.view(), in);
    send = b.wire_in_dev.view();
    if (!all_reduce) {
      b.wire_out_dev = take_device(shard, wire);
      recv = b.wire_out_dev.view();
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
  queue_result_on_device(b, *c.done);
  for (int u : b.units) units_[static_cast<size_t>(u)].has_pending = true;
  in_flight_.push_back(std::move(b));
  if (!options_.overlap_comm) complete_front();
}

void GradReducer::queue_result_on_device(Bucket& b, const device::Event& collective_done) {
  // Queued now, on the comm stream behind the collective (issue 10): no host wait for it.
  device::Backend& backend = device_->backend();
  device::Stream& stream = device_->comm();
  stream.wait(collective_done);
  const Device d = device_->device();
  if (b.result != nullptr) {
    const device::DeviceBuffer& wire =
        b.wire_out_dev.data() != nullptr ? b.wire_out_dev : b.wire_in_dev;
    backend.copy(stream, TensorView{b.result, DType::kF32, Shape{b.result_numel}, d},
                 slice(wire.view(), 0, b.result_numel));
  }
  const bool single = b.units.size() == 1;
  const bool all_reduce = options_.stage == 0 || !options_.reduce_scatter;
  int64_t poff = 0, soff = 0;
  for (int u : b.units) {
    const Unit& unit = units_[static_cast<size_t>(u)];
    const UnitShardInfo& info = layout_.unit(u);
    const TensorView accum = unit.accum_dev.view();
    if (options_.stage <= 1) {
      if (all_reduce) {
        if (!single) backend.copy(stream, accum, slice(b.in_dev.view(), poff, info.padded_numel));
        if (options_.stage == 1) {
          backend.copy(stream, unit.reduced_dev.view(),
                       slice(accum, layout_.shard_begin(u), info.shard_numel));
        }
      } else if (!single) {
        backend.copy(stream, unit.reduced_dev.view(),
                     slice(b.out_dev.view(), soff, info.shard_numel));
      }
    } else {
      TensorView part;
      if (all_reduce) {
        const TensorView full =
            single ? unit.micro_dev.view() : slice(b.in_dev.view(), poff, info.padded_numel);
        part = slice(full, layout_.shard_begin(u), info.shard_numel);
      } else {
        part = slice(b.out_dev.view(), soff, info.shard_numel);
      }
      backend.accumulate(stream, accum, part);
    }
    // `stream` is the comm stream: the partition is final there, not yet on compute.
    if (b.final_for_step && on_partition_final_) on_partition_final_(u, stream);
    poff += info.padded_numel;
    soff += info.shard_numel;
  }
  b.done = backend.create_event();
  stream.record(*b.done);
}

void GradReducer::note_finished_collectives() {
  std::erase_if(unchecked_, [this](const CommHandle& h) {
    if (!h.done()) return false;
    if (Status s = h.wait(); !s.ok() && status_.ok()) status_ = std::move(s);
    return true;
  });
}

Status GradReducer::wait_collectives() {
  // Why a host wait: the caller waits for the step's scalars next (after these collectives);
  // waiting for the handles first turns a dead peer into their timeout error.
  for (const CommHandle& h : unchecked_) {
    if (Status s = h.wait(); !s.ok() && status_.ok()) status_ = std::move(s);
  }
  unchecked_.clear();
  return status_;
}

void GradReducer::complete_front() {
  Bucket b = std::move(in_flight_.front());
  in_flight_.pop_front();
  if (device_ != nullptr) {
    // No host wait: the compute stream's later work (the unit's buffer zeroed for the next
    // micro-step, a pooled buffer packed again, the norm and the update) waits for the bucket.
    device_->compute().wait(*b.done);
    for (int u : b.units) {
      Unit& unit = units_[static_cast<size_t>(u)];
      unit.has_pending = false;
      if (options_.stage >= 2 && b.units.size() == 1) unit.micro_open = false;
    }
    unchecked_.push_back(std::move(b.pending));
    note_finished_collectives();
    give_device(std::move(b.in_dev));
    give_device(std::move(b.out_dev));
    give_device(std::move(b.wire_in_dev));
    give_device(std::move(b.wire_out_dev));
    return;
  }
  // Why a host wait: the result is consumed (accumulated) or the buffer reused right after this.
  const auto t0 = std::chrono::steady_clock::now();
  Status s = b.pending.wait();
  memory_.comm_wait_s +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!s.ok() && status_.ok()) status_ = s;
  if (b.result) {
    // The 16-bit wire result, widened into the fp32 buffer the code below reads.
    const void* wire = b.wire_out.empty() ? b.wire_in.data() : b.wire_out.data();
    kernels::cpu::cast_to_f32(wire, options_.comm_dtype, b.result, b.result_numel);
  }
  const bool single = b.units.size() == 1;
  const bool all_reduce = options_.stage == 0 || !options_.reduce_scatter;
  int64_t poff = 0, soff = 0;  // offsets of the unit in the packed input / the output
  for (int u : b.units) {
    Unit& unit = units_[static_cast<size_t>(u)];
    const UnitShardInfo& info = layout_.unit(u);
    unit.has_pending = false;
    if (options_.stage <= 1) {
      if (all_reduce) {
        if (!single) {
          std::memcpy(unit.accum.f32(), b.in.f32() + poff, unit.accum.nbytes());
        }
        if (options_.stage == 1) {
          std::memcpy(unit.reduced.f32(), unit.accum.f32() + layout_.shard_begin(u),
                      unit.reduced.nbytes());
        }
      } else if (!single) {
        std::memcpy(unit.reduced.f32(), b.out.f32() + soff, unit.reduced.nbytes());
      }
    } else {
      const float* part = nullptr;
      if (all_reduce) {
        part = (single ? unit.micro.f32() : b.in.f32() + poff) + layout_.shard_begin(u);
      } else {
        part = b.out.f32() + soff;
      }
      float* acc = unit.accum.f32();
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < info.shard_numel; ++i) acc[i] += part[i];
      if (single) {
        give_buffer(std::move(unit.micro));
        unit.micro = Tensor();
      }
    }
    poff += info.padded_numel;
    soff += info.shard_numel;
  }
  if (!b.in.empty()) give_buffer(std::move(b.in));
  if (!b.out.empty()) give_buffer(std::move(b.out));
  if (!b.wire_in.empty()) give_buffer(std::move(b.wire_in));
  if (!b.wire_out.empty()) give_buffer(std::move(b.wire_out));
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
  return status_;
}

const float* GradReducer::partition(int u) const {
  const Unit& unit = units_[static_cast<size_t>(u)];
  if (device_ != nullptr) {
    const device::DeviceBuffer& buf = options_.stage == 1 ? unit.reduced_dev : unit.accum_dev;
    return static_cast<const float*>(buf.data());
  }
  if (options_.stage == 0) return unit.accum.f32();
  if (options_.stage == 1) return unit.reduced.f32();
  return unit.accum.f32();
}

int64_t GradReducer::partition_begin(int u) const {
  return options_.stage == 0 ? 0 : layout_.shard_begin(u);
}

int64_t GradReducer::partition_numel(int u) const {
  return options_.stage == 0 ? layout_.unit(u).padded_numel : layout_.unit(u).shard_numel;
}

}  // namespace zero::sharding
