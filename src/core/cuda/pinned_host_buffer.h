// PinnedHostBuffer: RAII over cudaHostAlloc'd (page-locked) host memory, the only host memory an
// asynchronous copy reads or writes when its stream gets there rather than when it is queued. Not
// core/pinned_memory.h's mlock of ordinary memory: the CUDA driver must know the pages to copy from
// them without staging. Only included by code built with the CUDA backend.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "core/cuda/cuda_check.h"

namespace zero::cuda {

class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  // `bytes` of pinned host memory (0: none). Aborts when the driver refuses (out of pinned memory).
  explicit PinnedHostBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) CUDA_ABORT_IF_ERROR(cudaHostAlloc(&data_, bytes_, cudaHostAllocDefault));
  }
  // REQUIRES: no queued copy still reads or writes the memory (cudaFreeHost does not wait for
  // the streams of other devices).
  ~PinnedHostBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer(PinnedHostBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  PinnedHostBuffer& operator=(PinnedHostBuffer&& o) noexcept {
    if (this != &o) {
      if (data_ != nullptr) cudaFreeHost(data_);
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace zero::cuda
