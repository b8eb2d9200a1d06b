// The CUDA backend's streams and events (device/stream.h's contract on CUDA streams): one GPU per
// rank, chosen when the backend is created (the local rank later); every call that touches the
// device makes that GPU current on the calling thread first (cudaSetDevice), since the engine's
// threads (compute, comm, offload) are not the one that created the stream.
//
// Errors: an asynchronous call that fails to queue is kept and returned by the next synchronize(),
// as is a failure the device reports there (CUDA's sticky errors); ops a backend queues after a
// kept failure are skipped (failed()). Only built with the CUDA backend.
#pragma once

#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "core/cuda/cuda_stream.h"
#include "device/stream.h"

namespace zero::device {

// cudaSetDevice(device_index), aborting when it fails (a device that was usable at creation and
// is gone now is a dead device, not an input error). Returns device_index.
int activate_cuda_device(int device_index);

class CudaEvent final : public Event {
 public:
  // `timing`: also notes when the stream reached it (cudaEventElapsedTime); ordering alone
  // does not need it (cheaper records).
  explicit CudaEvent(int device_index, bool timing = false);
  ~CudaEvent() override;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  // A failed device reads as complete: the stream's synchronize() says what failed.
  bool query() const override;
  void synchronize() const override;

  cudaEvent_t get() const { return event_.get(); }
  int device_index() const { return device_index_; }

 private:
  const int device_index_;  // before event_: the device is current when event_ is created
  cuda::CudaEvent event_;
};

class CudaStream final : public Stream {
 public:
  CudaStream(std::string name, int device_index);
  // Waits for the work queued so far (as CpuStream's destructor runs it), then destroys.
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  Device device() const override { return Device::kCuda; }
  const std::string& name() const override { return name_; }
  // REQUIRES (record, wait): a CudaEvent of the same device.
  void record(Event& event) override;
  void wait(const Event& event) override;
  Status synchronize() override;

  // The non-blocking CUDA stream itself (kernel launchers take it).
  cudaStream_t get() const { return stream_.get(); }
  int device_index() const { return device_index_; }
  // Makes this stream's device current on the calling thread (before any launch on get()).
  void activate() const { activate_cuda_device(device_index_); }
  // Keeps `err` (from queueing `call` on this stream) for synchronize(), when it is the first.
  void note_error(cudaError_t err, const char* call);
  // True once a failure is kept: later ops are skipped until synchronize() returns it.
  bool failed() const;

 private:
  const std::string name_;
  const int device_index_;  // before stream_: the device is current when stream_ is created
  cuda::CudaStream stream_;
  mutable std::mutex mu_;
  Status first_error_;  // guarded by mu_
};

}  // namespace zero::device
