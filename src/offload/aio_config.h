// AioConfig: the ds_config `aio` block (DeepSpeed runtime/swap_tensor/aio_config.py) that tunes the
// NVMe swapper: chunk size, ring depth, worker threads, submission policy.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace zero::offload {

// O_DIRECT needs offsets, lengths and buffer addresses aligned to the logical block size of the
// device; 4096 covers every NVMe/ext4/xfs setup we target (DeepSpeed uses 1024 B x threads).
inline constexpr uint64_t kDirectIoAlignBytes = 4096;

struct AioConfig {
  uint64_t block_size_bytes = 1048576;  // bytes per I/O request (one SQE / iocb)
  int queue_depth = 8;                  // max requests in flight per worker
  int intra_op_parallelism = 1;         // worker threads (each with its own ring) per request
  bool single_submit = false;           // one submit syscall per request instead of a batch
  bool overlap_events = true;           // refill the ring as completions arrive vs drain batches
  bool use_gds = false;                 // cuFile / GPUDirect Storage (not built: Unimplemented)
};

// Parses the `aio` block. Missing keys take DeepSpeed's defaults; unknown keys and wrong types are
// INVALID_ARGUMENT naming the key; `thread_count` (renamed intra_op_parallelism in DeepSpeed
// PR #7056, then silently ignored there) is ignored with a warning naming the new key. `use_gds:
// true` is UNIMPLEMENTED. A null/absent block gives the defaults.
StatusOr<AioConfig> parse_aio_config(const nlohmann::json& aio_block);

// Range checks shared by the parser and programmatic callers: block_size a positive multiple of
// kDirectIoAlignBytes (<= 1 GiB, the io_uring registered-buffer cap), 1 <= queue_depth <= 4096,
// 1 <= intra_op_parallelism <= 256, use_gds false.
Status validate_aio_config(const AioConfig& config);

nlohmann::json aio_config_to_json(const AioConfig& config);

}  // namespace zero::offload
