// GradReducer: the model's GradSink under ZeRO. Backward hands over each unit's gradient (rounded
// to the model dtype, as a 16-bit backward would produce it); the reducer turns it into this rank's
// fp32 gradient partition:
//   stage 0   accumulate the full unit locally; all-reduce once per step
//   stage 1   accumulate the full unit locally; reduce-scatter once per step (at the boundary)
//   stage 2/3 reduce-scatter every micro-step as soon as the unit is ready; keep only the own shard
// With overlap_comm the collectives run on the communication thread while backward goes on; on the
// last micro-step, stages 0–1 reduce each unit as soon as it is final.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/param_access.h"
#include "sharding/shard_layout.h"
#include "sharding/zero_options.h"

namespace zero::sharding {

class GradReducer : public model::GradSink {
 public:
  GradReducer(const ShardLayout& layout, Communicator& comm, const ZeroOptions& options,
              MemoryAccounting& memory);
  ~GradReducer() override;

  // Zeroes the partition accumulators; `num_micro_steps` backward passes follow.
  void begin_step(int num_micro_steps);
  // Call before each micro-step's backward (0-based index).
  void begin_micro_step(int micro_step);

  float* grad_buffer(int u) override;
  void grad_ready(int u) override;

  // Issues what is left, waits for every collective, and leaves the reduced gradient of this rank's
  // partition of each unit in partition(u). Returns the first collective error.
  Status finish_step();
  // This rank's reduced fp32 gradient of unit u: the full padded unit at stage 0, the own shard
  // (shard_numel values) at stages 1–3. Valid after finish_step().
  const float* partition(int u) const;
  // Partition offset in unit-flat coordinates (0 at stage 0, shard_begin otherwise).
  int64_t partition_begin(int u) const;
  int64_t partition_numel(int u) const;

 private:
  struct Unit {
    Tensor micro;    // this micro-step's gradient as backward writes it (padded_numel)
    Tensor accum;    // stages 0–1: full-unit accumulator; stages 2–3: own-shard accumulator
    Tensor reduced;  // stage 1: reduce-scatter output; stages 2–3: one micro-step's reduced shard
    CommHandle pending;
    bool has_pending = false;
    bool reduced_this_step = false;  // stages 0–1 reduced early (overlap on the last micro-step)
  };
  void reduce_full_unit(int u);  // stages 0–1, once per step
  void complete(int u);          // wait + post-process one in-flight reduction
  void drain_until(int u);       // complete the FIFO up to and including u
  Tensor take_buffer(int64_t numel);
  void give_buffer(Tensor t);

  const ShardLayout& layout_;
  Communicator& comm_;
  ZeroOptions options_;
  MemoryAccounting& memory_;
  std::vector<Unit> units_;
  std::deque<int> in_flight_;  // units with a pending collective, in issue order
  int num_micro_steps_ = 1;
  int micro_step_ = 0;
  int64_t transient_bytes_ = 0;
  Status status_;
};

}  // namespace zero::sharding
