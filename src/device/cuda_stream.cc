// CudaStream and CudaEvent (cuda_stream.h).
#include "device/cuda_stream.h"

#include <utility>

#include "core/check.h"
#include "core/cuda/cuda_check.h"

namespace zero::device {

int activate_cuda_device(int device_index) {
  CUDA_ABORT_IF_ERROR(cudaSetDevice(device_index));
  return device_index;
}

// --- CudaEvent ---

CudaEvent::CudaEvent(int device_index, bool timing)
    : device_index_(activate_cuda_device(device_index)), event_(timing) {}

CudaEvent::~CudaEvent() { cudaSetDevice(device_index_); }  // event_ is destroyed after this

bool CudaEvent::query() const {
  activate_cuda_device(device_index_);
  return cudaEventQuery(event_.get()) != cudaErrorNotReady;
}

void CudaEvent::synchronize() const {
  activate_cuda_device(device_index_);
  // An error here is the device's sticky error: the streams' synchronize() returns it.
  (void)cudaEventSynchronize(event_.get());
}

// --- CudaStream ---

CudaStream::CudaStream(std::string name, int device_index)
    : name_(std::move(name)), device_index_(activate_cuda_device(device_index)) {}

CudaStream::~CudaStream() {
  cudaSetDevice(device_index_);
  // Why wait: ops queued here reference buffers and host outputs (sum_squares) that the owner
  // frees after the stream; cudaStreamDestroy alone returns before the work has run.
  cudaStreamSynchronize(stream_.get());
}

void CudaStream::record(Event& event) {
  auto& e = static_cast<CudaEvent&>(event);
  ZERO_CHECK(e.device_index() == device_index_, "stream ", name_, " on device ", device_index_,
             " records an event of device ", e.device_index());
  activate();
  note_error(cudaEventRecord(e.get(), stream_.get()), "cudaEventRecord");
}

void CudaStream::wait(const Event& event) {
  const auto& e = static_cast<const CudaEvent&>(event);
  activate();
  // Captures the event's most recent record now (CUDA's semantics, the contract of stream.h); an
  // event never recorded is complete, so the wait is a no-op.
  note_error(cudaStreamWaitEvent(stream_.get(), e.get(), 0), "cudaStreamWaitEvent");
}

Status CudaStream::synchronize() {
  activate();
  const cudaError_t err = cudaStreamSynchronize(stream_.get());
  std::lock_guard<std::mutex> lock(mu_);
  Status first = std::exchange(first_error_, ok_status());
  if (first.ok() && err != cudaSuccess) {
    first = internal_error("CUDA stream {} (device {}): {} ({})", name_, device_index_,
                           cudaGetErrorString(err), static_cast<int>(err));
  }
  return first;
}

void CudaStream::note_error(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (first_error_.ok()) {
    first_error_ =
        internal_error("CUDA stream {} (device {}): {} failed: {} ({})", name_, device_index_, call,
                       cudaGetErrorString(err), static_cast<int>(err));
  }
}

bool CudaStream::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !first_error_.ok();
}

}  // namespace zero::device
