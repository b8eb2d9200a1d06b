// Page-locking host memory, best effort (offload `pin_memory`). With a GPU, pinned (page-locked)
// buffers make host<->device copies asynchronous and full-speed; on the CPU backend mlock keeps the
// offloaded state out of swap. Locking can fail (RLIMIT_MEMLOCK, often 8 MiB for non-root users):
// the buffer then stays pageable and the caller warns once, naming the limit. Never an error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace zero {

// RLIMIT_MEMLOCK soft limit in bytes (INT64_MAX when unlimited).
int64_t memlock_limit_bytes();

// RAII lock of [data, data + nbytes): mlock on construction, munlock on destruction. Movable.
class PinnedRange {
 public:
  PinnedRange() = default;
  // Tries to lock; pinned() says whether it worked, why_not() why not.
  PinnedRange(void* data, size_t nbytes);
  ~PinnedRange();
  PinnedRange(const PinnedRange&) = delete;
  PinnedRange& operator=(const PinnedRange&) = delete;
  PinnedRange(PinnedRange&& o) noexcept;
  PinnedRange& operator=(PinnedRange&& o) noexcept;

  bool pinned() const { return pinned_; }
  size_t nbytes() const { return pinned_ ? nbytes_ : 0; }
  const std::string& why_not() const { return why_not_; }

 private:
  void unlock();
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  bool pinned_ = false;
  std::string why_not_;
};

}  // namespace zero
