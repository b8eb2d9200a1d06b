// Stage-3 inference on CPU ranks: each rank holds 1/N of every unit (its ZeRO-3 shard, fp32) and
// a unit is all-gathered when the model acquires it, so N ranks run a model none of them holds
// whole. Every rank runs the same forwards (the same prompts, the same sampling seed), so the
// gathers pair up and the tokens are those of one rank with the whole weights, bit for bit.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/param_access.h"
#include "model/param_layout.h"
#include "runtime/unit_init.h"
#include "sharding/shard_layout.h"

namespace zero::runtime {

class GatheredParams final : public model::ParamAccess {
 public:
  // Reads this rank's shard of every unit through `init` (unit-flat [begin, end), padding zero).
  // Errors: `init`'s.
  static StatusOr<std::unique_ptr<GatheredParams>> create(const model::ModelLayout& layout,
                                                          Communicator& comm,
                                                          const UnitInitFn& init);

  // Gathers unit u from every rank (a collective: every rank acquires the same units in the same
  // order) into a buffer held until release(u). Acquires nest (the tied head inside the final
  // unit). A failed gather ends the job (Communicator::abort_job): a rank cannot compute on.
  model::ParamView acquire(int u) override;
  void release(int u) override;

  // Bytes of this rank's shards (what it holds between forwards).
  int64_t shard_bytes() const;

 private:
  GatheredParams(const model::ModelLayout& layout, Communicator& comm)
      : shards_layout_(layout, comm.world_size(), comm.rank()), comm_(comm) {}

  sharding::ShardLayout shards_layout_;
  Communicator& comm_;
  std::vector<std::vector<float>> shards_;      // per unit, shard_numel fp32 values
  std::map<int, std::vector<float>> gathered_;  // acquired units, padded_numel each
  std::vector<std::vector<float>> spare_;       // released buffers, reused
};

}  // namespace zero::runtime
