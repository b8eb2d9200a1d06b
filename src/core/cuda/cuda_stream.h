// RAII owners of CUDA streams and events (STYLE.md §9). Non-copyable, movable. Only included by
// code built with the CUDA backend.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "core/cuda/cuda_check.h"

namespace zero::cuda {

class CudaStream {
 public:
  // A non-blocking stream (no implicit synchronisation with the legacy default stream).
  CudaStream() { CUDA_ABORT_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~CudaStream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  CudaStream(CudaStream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  CudaStream& operator=(CudaStream&& o) noexcept {
    if (this != &o) {
      if (stream_ != nullptr) cudaStreamDestroy(stream_);
      stream_ = std::exchange(o.stream_, nullptr);
    }
    return *this;
  }
  cudaStream_t get() const { return stream_; }
  operator cudaStream_t() const { return stream_; }  // NOLINT: used where a cudaStream_t is

 private:
  cudaStream_t stream_ = nullptr;
};

class CudaEvent {
 public:
  // Timing disabled by default: cheaper record/wait, which is all the synchronisation needs.
  explicit CudaEvent(bool timing = false) {
    CUDA_ABORT_IF_ERROR(
        cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~CudaEvent() {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  CudaEvent(CudaEvent&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  CudaEvent& operator=(CudaEvent&& o) noexcept {
    if (this != &o) {
      if (event_ != nullptr) cudaEventDestroy(event_);
      event_ = std::exchange(o.event_, nullptr);
    }
    return *this;
  }
  void record(cudaStream_t stream) { CUDA_ABORT_IF_ERROR(cudaEventRecord(event_, stream)); }
  // Makes `stream` wait (on the device, not the host) for the work recorded before this event.
  void make_wait(cudaStream_t stream) const {
    CUDA_ABORT_IF_ERROR(cudaStreamWaitEvent(stream, event_, 0));
  }
  bool done() const { return cudaEventQuery(event_) == cudaSuccess; }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace zero::cuda
