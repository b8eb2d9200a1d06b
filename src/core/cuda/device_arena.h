// DeviceArena: a caching allocator for one device, so a steady-state training step performs no
// cudaMalloc / cudaFree (both synchronise the device). Freed blocks go to a free list keyed by
// their rounded size and are handed out again best-fit; cudaMalloc is called only when no cached
// block fits, and on out-of-memory the cache is released and the call retried once.
//
// Stream contract: blocks are used in the order of the compute stream. A block that another stream
// (communication, copies) used may be freed only once the compute stream has waited for that work
// (an event), since the next owner may run on the compute stream immediately.
// Thread safety: not thread-safe; one arena per device, used from the thread that drives it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <unordered_map>

#include "core/status.h"

namespace zero::cuda {

struct ArenaStats {
  int64_t in_use_bytes = 0;       // handed out and not freed (rounded sizes)
  int64_t peak_in_use_bytes = 0;  // max of in_use_bytes since construction / reset_peak()
  int64_t reserved_bytes = 0;     // obtained from cudaMalloc and not returned
  int64_t cuda_malloc_calls = 0;  // total cudaMalloc calls (steady state: constant)
  int64_t cache_hits = 0;         // allocations served from the free list
};

class DeviceArena {
 public:
  explicit DeviceArena(int device);
  ~DeviceArena();  // returns every block to the driver (all must be free: checked)
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // A block of at least `bytes` (256-byte aligned). bytes == 0 returns nullptr. Out of memory is
  // kResourceExhausted naming the request and the arena's in-use / reserved bytes.
  StatusOr<void*> allocate(size_t bytes);
  // REQUIRES: p came from allocate() and was not freed. nullptr is a no-op.
  void free(void* p);
  // Returns every cached (free) block to the driver.
  void release_cache();

  const ArenaStats& stats() const { return stats_; }
  void reset_peak() { stats_.peak_in_use_bytes = stats_.in_use_bytes; }
  int device() const { return device_; }

  // Rounding: 512 B granularity below 1 MiB, 2 MiB above (fewer distinct sizes, less
  // fragmentation from the many per-step activation buffers of identical shape).
  static size_t round_size(size_t bytes);

 private:
  int device_;
  ArenaStats stats_;
  std::multimap<size_t, void*> free_;         // rounded size -> cached block
  std::unordered_map<void*, size_t> in_use_;  // block -> rounded size
  std::unordered_map<void*, size_t> all_;     // every cudaMalloc'd block -> rounded size
};

// RAII over one arena block (or a plain cudaMalloc when arena is null).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static StatusOr<DeviceBuffer> create(size_t bytes, DeviceArena* arena = nullptr);
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;

  void reset();
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }
  bool empty() const { return ptr_ == nullptr; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  DeviceArena* arena_ = nullptr;
};

}  // namespace zero::cuda
