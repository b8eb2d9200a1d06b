// OffloadOptions: zero_optimization.offload_optimizer and offload_param as the engine and the
// optimizer-state store take them (docs/offload.md).
#pragma once

#include <string>

#include "offload/aio_config.h"
#include "sharding/param_store.h"

namespace zero::runtime {

// zero_optimization.offload_optimizer (+ the `aio` block): where the fp32 master weights and the
// optimizer moments of this rank's partition live and which kernel updates them (docs/offload.md).
enum class OptimizerOffload { kNone, kCpu, kNvme };

struct OffloadOptions {
  // kCpu: the vectorised CPU Adam (offload::cpu_adam_update; Lamb stays scalar), state in RAM.
  // kNvme: as kCpu, and master + exp_avg + exp_avg_sq live in swap files under nvme_path (stage 3
  // only; DeepSpeed treats nvme as cpu below stage 3 and so do we, with a warning).
  OptimizerOffload optimizer = OptimizerOffload::kNone;
  std::string nvme_path;        // swap directory (created if missing); required for kNvme
  offload::AioConfig aio;       // the ds_config `aio` block
  bool pipeline_read = false;   // read the next unit's state while this one updates
  bool pipeline_write = false;  // write the previous unit's state back while this one updates
  // offload_optimizer.fast_init: initial moments are not written to NVMe (the preallocated swap
  // files read back as zeros), a third of the initialisation I/O.
  bool fast_init = false;
  // offload_optimizer.pin_memory: page-lock the offloaded state kept in RAM (and the NVMe staging
  // sets), best effort: a warning names RLIMIT_MEMLOCK when the lock is refused.
  bool pin_memory = false;
  // offload_optimizer.ratio: the fraction of units (DeepSpeed: of sub-groups) whose update runs
  // in the offloaded optimizer; unit u is offloaded iff u < int(ratio * units). The others keep
  // their state resident (on the device, on GPU builds) and use the device update.
  double ratio = 1.0;
  // offload_param (stage 3 only; below stage 3 it is ignored with a warning, as DeepSpeed does).
  sharding::ParamOffloadOptions param;
};

}  // namespace zero::runtime
