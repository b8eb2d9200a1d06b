// CudaHostCheckpoints (cuda_host_checkpoints.h): the copies of checkpointed block inputs between
// the device slots and pinned host memory, on a side stream ordered by events.
#include "model/cuda_host_checkpoints.h"

#include "core/check.h"
#include "core/cuda/cuda_check.h"

namespace zero::model {

CudaHostCheckpoints::~CudaHostCheckpoints() {
  // Why: queued copies still read or write the pinned memory freed next.
  cudaStreamSynchronize(side_.get());
}

void CudaHostCheckpoints::reset(int layers, int64_t numel,
                                const std::array<float*, kDeviceSlots>& slots) {
  slots_ = slots;
  const size_t bytes = static_cast<size_t>(layers) * static_cast<size_t>(numel) * sizeof(float);
  numel_ = numel;
  if (bytes == host_.bytes()) return;
  // Why the host wait: the copies of the old shape still use the memory replaced here; the batch
  // shape changes rarely (eval, the last batch).
  CUDA_ABORT_IF_ERROR(cudaStreamSynchronize(side_.get()));
  host_ = zero::cuda::PinnedHostBuffer();
  host_ = zero::cuda::PinnedHostBuffer(bytes);
}

void CudaHostCheckpoints::synchronize() { CUDA_ABORT_IF_ERROR(cudaStreamSynchronize(side_.get())); }

void CudaHostCheckpoints::await_copies(int layer, cudaStream_t compute) {
  copied_[static_cast<size_t>(layer % kDeviceSlots)].make_wait(compute);
}

void CudaHostCheckpoints::follow(cudaStream_t compute) {
  compute_mark_.record(compute);
  compute_mark_.make_wait(side_.get());
}

void CudaHostCheckpoints::save(int layer, cudaStream_t compute) {
  ZERO_CHECK(host_.data() != nullptr, "host checkpoints saved before reset");
  follow(compute);
  CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(host_input(layer), device_input(layer),
                                      static_cast<size_t>(numel_) * sizeof(float),
                                      cudaMemcpyDeviceToHost, side_.get()));
  copied_[static_cast<size_t>(layer % kDeviceSlots)].record(side_.get());
}

void CudaHostCheckpoints::fetch(int layer, cudaStream_t compute) {
  ZERO_CHECK(host_.data() != nullptr, "host checkpoints fetched before reset");
  follow(compute);
  CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(device_input(layer), host_input(layer),
                                      static_cast<size_t>(numel_) * sizeof(float),
                                      cudaMemcpyHostToDevice, side_.get()));
  copied_[static_cast<size_t>(layer % kDeviceSlots)].record(side_.get());
}

}  // namespace zero::model
