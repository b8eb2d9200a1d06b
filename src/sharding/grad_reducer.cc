// Gradient reduction for ZeRO stages 0–3 (see grad_reducer.h).
#include "sharding/grad_reducer.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/check.h"

namespace zero::sharding {

namespace {
void zero_fill(Tensor& t) { std::memset(t.data(), 0, t.nbytes()); }
}  // namespace

GradReducer::GradReducer(const ShardLayout& layout, Communicator& comm, const ZeroOptions& options,
                         MemoryAccounting& memory)
    : layout_(layout), comm_(comm), options_(options), memory_(memory) {
  units_.resize(static_cast<size_t>(layout.num_units()));
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

GradReducer::~GradReducer() {
  // In-flight collectives write into our buffers: finish them first.
  for (auto& u : units_) {
    if (u.has_pending) (void)u.pending.wait();
  }
}

Tensor GradReducer::take_buffer(int64_t numel) {
  transient_bytes_ += numel * 4;
  memory_.peak_transient_grad_bytes = std::max(memory_.peak_transient_grad_bytes, transient_bytes_);
  return Tensor(Shape{numel});
}

void GradReducer::give_buffer(Tensor t) { transient_bytes_ -= static_cast<int64_t>(t.nbytes()); }

void GradReducer::begin_step(int num_micro_steps) {
  num_micro_steps_ = num_micro_steps;
  status_ = Status();
  for (auto& u : units_) {
    zero_fill(u.accum);
    u.reduced_this_step = false;
  }
}

void GradReducer::begin_micro_step(int micro_step) { micro_step_ = micro_step; }

float* GradReducer::grad_buffer(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  // A previous micro-step's reduction may still read this unit's buffer.
  if (unit.has_pending) drain_until(u);
  if (unit.micro.empty()) unit.micro = take_buffer(layout_.unit(u).padded_numel);
  return unit.micro.f32();
}

void GradReducer::grad_ready(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  const UnitShardInfo& info = layout_.unit(u);
  float* micro = unit.micro.f32();
  const DType dtype = options_.model_dtype;
  if (options_.stage <= 1) {
    float* acc = unit.accum.f32();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < info.padded_numel; ++i) acc[i] += round_to_dtype(micro[i], dtype);
    give_buffer(std::move(unit.micro));
    unit.micro = Tensor();
    // On the last micro-step this unit's gradient is final: with overlap, reduce it right away.
    if (options_.overlap_comm && micro_step_ == num_micro_steps_ - 1) reduce_full_unit(u);
    return;
  }
  // Stages 2–3: reduce this micro-step's gradient now; only the own shard is kept.
  if (dtype != DType::kF32) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < info.padded_numel; ++i) micro[i] = round_to_dtype(micro[i], dtype);
  }
  const size_t P = static_cast<size_t>(info.shard_numel);
  if (options_.reduce_scatter) {
    unit.reduced = take_buffer(info.shard_numel);
    unit.pending = comm_.reduce_scatter_async(micro, unit.reduced.f32(), P, DType::kF32);
  } else {
    // DeepSpeed's reduce_scatter=false: all-reduce the whole unit, keep the own shard.
    unit.pending = comm_.all_reduce_async(micro, P * static_cast<size_t>(layout_.world_size()),
                                          DType::kF32, ReduceOp::kSum);
  }
  unit.has_pending = true;
  in_flight_.push_back(u);
  if (!options_.overlap_comm) complete(u);
}

void GradReducer::reduce_full_unit(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  const UnitShardInfo& info = layout_.unit(u);
  unit.reduced_this_step = true;
  const size_t P = static_cast<size_t>(info.shard_numel);
  if (options_.stage == 0 || !options_.reduce_scatter) {
    unit.pending = comm_.all_reduce_async(unit.accum.f32(), static_cast<size_t>(info.padded_numel),
                                          DType::kF32, ReduceOp::kSum);
  } else {
    unit.pending = comm_.reduce_scatter_async(unit.accum.f32(), unit.reduced.f32(), P, DType::kF32);
  }
  unit.has_pending = true;
  in_flight_.push_back(u);
  if (!options_.overlap_comm) complete(u);
}

void GradReducer::complete(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  // Why: the result is consumed (accumulated) or the buffer reused right after this.
  const auto t0 = std::chrono::steady_clock::now();
  Status s = unit.pending.wait();
  memory_.comm_wait_s +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!s.ok() && status_.ok()) status_ = s;
  unit.has_pending = false;
  auto it = std::find(in_flight_.begin(), in_flight_.end(), u);
  if (it != in_flight_.end()) in_flight_.erase(it);
  if (options_.stage <= 1) {
    if (options_.stage == 1 && !options_.reduce_scatter) {
      std::memcpy(unit.reduced.f32(), unit.accum.f32() + layout_.shard_begin(u),
                  unit.reduced.nbytes());
    }
    return;
  }
  const UnitShardInfo& info = layout_.unit(u);
  const float* part =
      options_.reduce_scatter ? unit.reduced.f32() : unit.micro.f32() + layout_.shard_begin(u);
  float* acc = unit.accum.f32();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < info.shard_numel; ++i) acc[i] += part[i];
  if (options_.reduce_scatter) {
    give_buffer(std::move(unit.reduced));
    unit.reduced = Tensor();
  }
  give_buffer(std::move(unit.micro));
  unit.micro = Tensor();
}

void GradReducer::drain_until(int u) {
  // Collectives complete in issue order; completing the FIFO front first keeps that order.
  while (!in_flight_.empty()) {
    const int v = in_flight_.front();
    complete(v);
    if (v == u) break;
  }
}

Status GradReducer::finish_step() {
  if (options_.stage <= 1) {
    for (int u = 0; u < layout_.num_units(); ++u) {
      if (!units_[static_cast<size_t>(u)].reduced_this_step) reduce_full_unit(u);
    }
  }
  while (!in_flight_.empty()) complete(in_flight_.front());
  return status_;
}

const float* GradReducer::partition(int u) const {
  const Unit& unit = units_[static_cast<size_t>(u)];
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
