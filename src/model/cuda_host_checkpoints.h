// CudaHostCheckpoints: activation_checkpointing.cpu_checkpointing on the CUDA model. With
// activation checkpointing the model keeps only each block's input (the residual stream, (N, C))
// through forward; here those inputs live in pinned host memory instead of the device slab. Each
// block input is copied out on a side stream as soon as it is produced and copied back, again on
// the side stream, one block ahead of its recompute in backward, so the device holds only a ring
// of kDeviceSlots inputs: block l's input sits in slot l % kDeviceSlots.
//
// Stream contract: the model's kernels run on one compute stream; every ordering between it and
// the side stream is an event (no host waits). A copy out of or into a slot is queued after all
// the compute work enqueued before the call (an event recorded then), and the compute stream
// waits for a slot's last copy before it touches the slot again (await_copies). The host memory is
// written and read only by the side stream, in its own order (copy out before copy back).
// Thread safety: none; the thread that drives the model calls it.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstdint>

#include "core/cuda/cuda_stream.h"
#include "core/cuda/pinned_host_buffer.h"

namespace zero::model {

class CudaHostCheckpoints {
 public:
  // Two slots: block l computes in one while the other's copy (out in forward, back in backward)
  // runs beside it.
  static constexpr int kDeviceSlots = 2;

  // On the current device (the side stream and events are created there).
  CudaHostCheckpoints() = default;
  ~CudaHostCheckpoints();  // waits for the side stream (its copies read the memory freed)
  CudaHostCheckpoints(const CudaHostCheckpoints&) = delete;
  CudaHostCheckpoints& operator=(const CudaHostCheckpoints&) = delete;

  // Host room for `layers` block inputs of `numel` floats each, and the device slots (numel floats
  // each, the model's memory). Waits for the side stream when the host memory is replaced.
  void reset(int layers, int64_t numel, const std::array<float*, kDeviceSlots>& slots);

  // The device slot block `layer`'s input is in.
  float* device_input(int layer) const { return slots_[static_cast<size_t>(layer % kDeviceSlots)]; }

  // Makes `compute` wait (on the device) for the last copy out of or into `layer`'s slot: call it
  // before enqueueing kernels that write the slot (forward) or read a copied-back input (backward).
  void await_copies(int layer, cudaStream_t compute);
  // Forward: queues the copy of `layer`'s input from its slot to host memory, after the compute
  // work enqueued so far (which produced it).
  void save(int layer, cudaStream_t compute);
  // Backward: queues the copy of `layer`'s input from host memory back into its slot, after the
  // compute work enqueued so far (the last to use the slot).
  void fetch(int layer, cudaStream_t compute);

  // Waits (on the host) for every queued copy: before the device slots are freed.
  void synchronize();

  // The side stream the copies run on (tests hold it with a host function to force an order).
  cudaStream_t side_stream() const { return side_.get(); }

  // Pinned host bytes of the block inputs.
  int64_t host_bytes() const { return static_cast<int64_t>(host_.bytes()); }

 private:
  // Orders the side stream after everything enqueued on `compute` so far.
  void follow(cudaStream_t compute);
  float* host_input(int layer) const {
    return static_cast<float*>(host_.data()) + static_cast<int64_t>(layer) * numel_;
  }

  zero::cuda::CudaStream side_;
  zero::cuda::CudaEvent compute_mark_;                      // re-recorded before each copy
  std::array<zero::cuda::CudaEvent, kDeviceSlots> copied_;  // the last copy of each slot
  zero::cuda::PinnedHostBuffer host_;
  std::array<float*, kDeviceSlots> slots_{};
  int64_t numel_ = 0;
};

}  // namespace zero::model
