// NvmeSwapper: ZeRO-Infinity's NVMe tier. One preallocated swap file per (rank, tensor class),
// offset addressing, O_DIRECT, asynchronous chunked I/O on io_uring (libaio or a pread/pwrite pool
// as fallbacks) so callers can read ahead the next tiles and write behind the previous ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "offload/aio_config.h"

namespace zero::offload {

enum class IoBackend {
  kAuto,        // io_uring, else libaio (when built with it), else the thread pool
  kIoUring,     // liburing ring per worker, staging buffers registered as fixed buffers
  kLibaio,      // io_setup/io_submit per worker (only with ZERO_WITH_LIBAIO)
  kThreadPool,  // synchronous pread/pwrite on intra_op_parallelism worker threads
};
const char* io_backend_name(IoBackend backend);

// One I/O request as the engine sees it (after chunking and padding), for fault hooks.
struct IoRequestInfo {
  const std::string* path;
  bool is_write;
  uint64_t offset_bytes;
  size_t length_bytes;  // padded length submitted to the kernel
};

// Test seam (like FaultInjectingStorage): every decision point the OS makes can be overridden.
// Methods are called from the swapper's worker threads and the creating thread: implementations
// must be thread-safe. Defaults change nothing.
class NvmeFaultHook {
 public:
  virtual ~NvmeFaultHook() = default;
  // Result of a completed request (bytes or -errno); return what the swapper should see.
  virtual int64_t on_completion(const IoRequestInfo& request, int64_t result) { return result; }
  // errno to fail preallocation of `path` with (0: run fallocate for real).
  virtual int on_preallocate(const std::string& path, uint64_t capacity_bytes) { return 0; }
  // errno to fail open(O_DIRECT) of `path` with (0: open for real), e.g. EINVAL as on file systems
  // without O_DIRECT (tmpfs before Linux 6.6).
  virtual int on_open_direct(const std::string& path) { return 0; }
  // errno to fail the start of `backend` with (0: start it for real), e.g. ENOSYS for io_uring.
  virtual int on_engine_init(IoBackend backend) { return 0; }
};

struct NvmeSwapperOptions {
  std::string nvme_path;  // directory for the swap files; created (with parents) if missing
  int rank = 0;           // names the files: zero_rank<rank>_<class>.swp
  AioConfig aio;
  IoBackend backend = IoBackend::kAuto;  // a forced backend that cannot start is an error
  bool allow_buffered_fallback = true;   // O_DIRECT refused (tmpfs) -> buffered I/O with a warning
  NvmeFaultHook* fault_hook = nullptr;   // not owned; must outlive the swapper
};

// Handle of one submitted read or write. Wait on it exactly once.
struct Ticket {
  uint64_t id = 0;
};

// Thread safety: every method may be called from any thread concurrently, except that
// add_file must not race with I/O on the same class. Buffers passed to submit_* belong to the
// swapper until the ticket is waited on.
//
// Layout contract: offsets are multiples of kDirectIoAlignBytes; a request of n bytes occupies
// slot_bytes(n) bytes of the file (O_DIRECT pads the tail internally, so the bytes between
// offset + n and offset + slot_bytes(n) are clobbered by a write). Callers that pack tiles use
// slot_bytes to place them. dst/src need no alignment: 4096-aligned buffers go to the kernel
// directly, others (and padded tails) go through the swapper's staging buffers.
class NvmeSwapper {
 public:
  // Creates nvme_path if missing, probes O_DIRECT and starts intra_op_parallelism workers of the
  // chosen backend (falling back with a warning, see IoBackend::kAuto).
  static StatusOr<std::unique_ptr<NvmeSwapper>> create(const NvmeSwapperOptions& options);

  // Waits for outstanding I/O (errors are logged), closes and removes the swap files and exactly
  // the directories create() made.
  ~NvmeSwapper();
  NvmeSwapper(const NvmeSwapper&) = delete;
  NvmeSwapper& operator=(const NvmeSwapper&) = delete;

  // Creates and preallocates (fallocate) the file of `file_class` ([A-Za-z0-9_-]+, e.g. "param",
  // "exp_avg") with room for `capacity_bytes` (rounded up to kDirectIoAlignBytes).
  // RESOURCE_EXHAUSTED naming nvme_path, the bytes needed and the bytes free when the disk is too
  // small; ALREADY_EXISTS if the class was added before.
  Status add_file(const std::string& file_class, uint64_t capacity_bytes);

  // Starts reading `nbytes` at `offset_bytes` of the class file into `dst`.
  // REQUIRES: dst holds nbytes and is neither read nor written until wait(ticket) returns.
  // Range or alignment violations are returned as errors, not tickets.
  StatusOr<Ticket> submit_read(const std::string& file_class, uint64_t offset_bytes, size_t nbytes,
                               void* dst);
  // Starts writing `nbytes` from `src` at `offset_bytes`. REQUIRES: src unchanged until wait.
  StatusOr<Ticket> submit_write(const std::string& file_class, uint64_t offset_bytes, size_t nbytes,
                                const void* src);

  // Blocks until the request is done; returns its first error (naming file, offset and errno
  // text). FAILED_PRECONDITION for an unknown or already-waited ticket.
  Status wait(Ticket ticket);
  // Blocks until every outstanding request is done and forgets their tickets; returns the first
  // error among them.
  Status wait_all();

  // Synchronous helpers: submit + wait.
  Status read(const std::string& file_class, uint64_t offset_bytes, size_t nbytes, void* dst);
  Status write(const std::string& file_class, uint64_t offset_bytes, size_t nbytes,
               const void* src);

  // Bytes a request of `nbytes` occupies in a swap file (nbytes rounded up to the alignment).
  static uint64_t slot_bytes(uint64_t nbytes);

  IoBackend backend() const;
  bool direct_io() const;  // false after the buffered fallback
  const AioConfig& aio_config() const;
  // Path of the swap file of `file_class` (empty if not added).
  std::string file_path(const std::string& file_class) const;
  // Bytes currently preallocated for `file_class` (0 if not added).
  uint64_t capacity_bytes(const std::string& file_class) const;

  class Impl;

 private:
  explicit NvmeSwapper(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace zero::offload
