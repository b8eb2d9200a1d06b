// PinnedRange and the memlock limit (see pinned_memory.h).
#include "core/pinned_memory.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>

namespace zero {

int64_t memlock_limit_bytes() {
  rlimit lim{};
  if (::getrlimit(RLIMIT_MEMLOCK, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) {
    return std::numeric_limits<int64_t>::max();
  }
  return static_cast<int64_t>(lim.rlim_cur);
}

PinnedRange::PinnedRange(void* data, size_t nbytes) : data_(data), nbytes_(nbytes) {
  if (data == nullptr || nbytes == 0) return;
  if (::mlock(data, nbytes) == 0) {
    pinned_ = true;
    return;
  }
  const int err = errno;
  why_not_ =
      fmt::format("mlock of {} bytes failed: {} (RLIMIT_MEMLOCK is {})", nbytes, std::strerror(err),
                  memlock_limit_bytes() == std::numeric_limits<int64_t>::max()
                      ? std::string("unlimited")
                      : fmt::format("{} bytes", memlock_limit_bytes()));
}

PinnedRange::~PinnedRange() { unlock(); }

void PinnedRange::unlock() {
  if (pinned_) ::munlock(data_, nbytes_);
  pinned_ = false;
}

PinnedRange::PinnedRange(PinnedRange&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      nbytes_(std::exchange(o.nbytes_, 0)),
      pinned_(std::exchange(o.pinned_, false)),
      why_not_(std::move(o.why_not_)) {}

PinnedRange& PinnedRange::operator=(PinnedRange&& o) noexcept {
  if (this != &o) {
    unlock();
    data_ = std::exchange(o.data_, nullptr);
    nbytes_ = std::exchange(o.nbytes_, 0);
    pinned_ = std::exchange(o.pinned_, false);
    why_not_ = std::move(o.why_not_);
  }
  return *this;
}

}  // namespace zero
