// DeviceArena and DeviceBuffer (see device_arena.h). Built only with the CUDA backend.
#include "core/cuda/device_arena.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <utility>

#include "core/check.h"
#include "core/cuda/cuda_check.h"

namespace zero::cuda {

DeviceArena::DeviceArena(int device) : device_(device) {}

DeviceArena::~DeviceArena() {
  ZERO_CHECK(in_use_.empty(), "DeviceArena destroyed with ", in_use_.size(),
             " block(s) still in use");
  release_cache();
}

size_t DeviceArena::round_size(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t{2} << 20, kSmallLimit = size_t{1} << 20;
  if (bytes <= kSmallLimit) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

StatusOr<void*> DeviceArena::allocate(size_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  const size_t size = round_size(bytes);
  // Best fit among cached blocks, accepting at most 1/8 slack so a small request does not pin a
  // large block.
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first <= size + size / 8) {
    void* p = it->second;
    const size_t got = it->first;
    free_.erase(it);
    in_use_.emplace(p, got);
    stats_.in_use_bytes += static_cast<int64_t>(got);
    stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
    stats_.cache_hits += 1;
    return p;
  }
  CUDA_CHECK(cudaSetDevice(device_));
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, size);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    // Why: cached blocks of other sizes may be what stands between us and success.
    release_cache();
    err = cudaMalloc(&p, size);
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return resource_exhausted(
        "out of GPU memory on device {}: cudaMalloc({} bytes) failed ({}); the arena holds {} "
        "bytes in use, {} reserved",
        device_, size, cudaGetErrorString(err), stats_.in_use_bytes, stats_.reserved_bytes);
  }
  stats_.cuda_malloc_calls += 1;
  stats_.reserved_bytes += static_cast<int64_t>(size);
  all_.emplace(p, size);
  in_use_.emplace(p, size);
  stats_.in_use_bytes += static_cast<int64_t>(size);
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  return p;
}

void DeviceArena::free(void* p) {
  if (p == nullptr) return;
  auto it = in_use_.find(p);
  ZERO_CHECK(it != in_use_.end(), "DeviceArena::free of a pointer it did not hand out");
  stats_.in_use_bytes -= static_cast<int64_t>(it->second);
  free_.emplace(it->second, p);
  in_use_.erase(it);
}

void DeviceArena::release_cache() {
  if (free_.empty()) return;
  cudaSetDevice(device_);
  for (const auto& [size, p] : free_) {
    // Why the device-wide sync implied by cudaFree is acceptable: this runs at teardown or after an
    // out-of-memory, never in the steady state.
    cudaFree(p);
    stats_.reserved_bytes -= static_cast<int64_t>(size);
    all_.erase(p);
  }
  free_.clear();
}

StatusOr<DeviceBuffer> DeviceBuffer::create(size_t bytes, DeviceArena* arena) {
  DeviceBuffer b;
  b.bytes_ = bytes;
  b.arena_ = arena;
  if (bytes == 0) return b;
  if (arena != nullptr) {
    ZERO_ASSIGN_OR_RETURN(b.ptr_, arena->allocate(bytes));
  } else {
    const cudaError_t err = cudaMalloc(&b.ptr_, bytes);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      b.ptr_ = nullptr;
      return resource_exhausted("out of GPU memory: cudaMalloc({} bytes) failed ({})", bytes,
                                cudaGetErrorString(err));
    }
  }
  return b;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      arena_(std::exchange(o.arena_, nullptr)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    arena_ = std::exchange(o.arena_, nullptr);
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (ptr_ == nullptr) return;
  if (arena_ != nullptr) {
    arena_->free(ptr_);
  } else {
    cudaFree(ptr_);
  }
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace zero::cuda
