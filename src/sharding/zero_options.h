// ZeroOptions: the zero_optimization settings the sharding layer acts on (resolved from ds_config),
// in numel (DeepSpeed's bucket sizes count elements, not bytes).
#pragma once

#include <cstdint>
#include <limits>

#include "core/dtype.h"

namespace zero::sharding {

struct ZeroOptions {
  int stage = 0;
  // Reduce / gather unit k on the communication thread while unit k−1 computes.
  bool overlap_comm = false;
  // false: all-reduce the gradients, then keep the own shard (DeepSpeed's meaning).
  bool reduce_scatter = true;
  // false: each owner broadcasts its shard instead of one all-gather.
  bool allgather_partitions = true;
  int64_t reduce_bucket_numel = 500'000'000;
  // Stage 3.
  int64_t prefetch_bucket_numel = 50'000'000;
  int64_t max_live_numel = 1'000'000'000;
  int64_t max_reuse_distance_numel = 1'000'000'000;
  int64_t param_persistence_threshold_numel = 100'000;
  int64_t model_persistence_threshold_numel = std::numeric_limits<int64_t>::max();
  // Model (16-bit) dtype: gradients handed over by backward are rounded to it.
  DType model_dtype = DType::kF32;
  // communication_data_type: gradients travel in this dtype (rounded to it before the collective;
  // the communicator sums in fp32 and rounds the result back), halving the reduce bytes for
  // 16-bit. Accumulation across micro-steps stays fp32 whatever it is.
  DType comm_dtype = DType::kF32;
  // Stages 2-3 with the reducer on a device (set by the engine for offload_optimizer on the device
  // path, ZeRO-Offload's layout): this rank's fp32 gradient partitions live in page-locked host
  // memory; each micro-step's reduced shard is added to them through a pooled device buffer on a
  // copy stream (GradReducer), so the device holds only the buckets in flight.
  bool grads_on_host = false;
};

// Bytes a rank holds, by class (persistent allocations), and the transient peaks.
struct MemoryAccounting {
  int64_t master_bytes = 0;               // fp32 master weights
  int64_t optimizer_state_bytes = 0;      // exp_avg + exp_avg_sq
  int64_t offloaded_bytes = 0;            // master + moments in NVMe swap files (not in RAM)
  int64_t offloaded_param_bytes = 0;      // stage-3 parameter shards in NVMe swap files
  int64_t pinned_bytes = 0;               // host memory page-locked for offload (pin_memory)
  int64_t grad_bytes = 0;                 // persistent fp32 gradient accumulators
  int64_t param_bytes = 0;                // resident working parameters (full units or shards)
  int64_t peak_transient_grad_bytes = 0;  // micro-step gradient buffers in flight
  int64_t peak_gathered_param_bytes = 0;  // stage 3: gathered units alive at once
  int peak_gathered_units = 0;
  // Of the bytes above, those in device memory (`--device cuda` with the ZeRO state on the device:
  // working parameters, gradient buffers, master weights and moments); the rest is host memory.
  int64_t device_bytes = 0;
  // Time the compute thread spent blocked waiting for collectives (the communication that was not
  // hidden behind compute), cumulative.
  double comm_wait_s = 0.0;
};

}  // namespace zero::sharding
