// I/O engines of the NVMe swapper (internal to src/offload): one submits a batch of positional
// reads/writes and reaps their completions, used by one worker thread — io_uring, libaio (with
// ZERO_WITH_LIBAIO) or synchronous pread/pwrite.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "offload/nvme_swapper.h"

namespace zero::offload {

struct EngineOp {
  int fd;
  bool is_write;
  void* buffer;
  size_t length_bytes;
  uint64_t offset_bytes;
  int fixed_index;  // registered staging slot, or -1
  uint64_t tag;     // returned in the completion (the worker's slot index)
};
struct EngineCompletion {
  uint64_t tag;
  int64_t result;  // bytes transferred or -errno
};

class IoEngine {
 public:
  virtual ~IoEngine() = default;
  // Hands `ops` to the kernel. Per-op failures come back as completions.
  virtual void submit(std::span<const EngineOp> ops) = 0;
  // Appends at least `min_completions` completions to `out` (blocking for them).
  virtual void reap(int min_completions, std::vector<EngineCompletion>* out) = 0;
  // Whether staging slots are registered (fixed buffers).
  virtual bool fixed_buffers() const { return false; }
};

// A started engine of `backend` (not kAuto) with `queue_depth` requests in flight; io_uring
// registers `staging_slots` as fixed buffers when it can. An error when the backend cannot start
// (io_uring refused, libaio not built in).
StatusOr<std::unique_ptr<IoEngine>> make_io_engine(IoBackend backend, int queue_depth,
                                                   std::span<const iovec> staging_slots);

}  // namespace zero::offload
