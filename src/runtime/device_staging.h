// Device staging: the model runs on a device (a CUDA GPU) while the ZeRO state — the working
// parameters of the ParamCoordinator, the gradient accumulators of the GradReducer, master weights
// and moments — stays in host memory. The first step of the CUDA engine (issue 11): every unit the
// model acquires is copied to the device, every gradient it finishes copied back. The coordinator
// and reducer moving their buffers onto the device (no copies, collectives on the device) is the
// next; the model does not change then, it already reads device views.
//
// Both adapters queue their copies on the execution context's compute stream, the stream the
// model's kernels run on, so stream order makes every copy happen before the kernels that read it.
// The host waits only where host memory is handed back (each wait says why).
#pragma once

#include <memory>
#include <vector>

#include "device/backend.h"
#include "model/param_access.h"
#include "model/param_layout.h"

namespace zero::runtime {

// A ParamAccess on the device over one in host memory: acquire(u) copies the host unit into a
// device buffer of unit u (allocated once, reused) and returns its device view.
class StagedParams final : public model::ParamAccess {
 public:
  StagedParams(model::ParamAccess& host, device::ExecutionContext& ctx, int num_units);
  ~StagedParams() override;

  model::ParamView acquire(int u) override;
  void release(int u) override;
  // Device bytes held for parameters.
  int64_t device_bytes() const;

 private:
  model::ParamAccess& host_;
  device::ExecutionContext& ctx_;
  std::vector<device::DeviceBuffer> units_;
  std::vector<std::unique_ptr<device::Event>> uploaded_;
};

// A GradSink on the device over one in host memory: the first grad_buffer(u) of a backward copies
// the host accumulator to the device (so the model accumulates onto it exactly as it would on the
// host), grad_ready(u) copies it back before handing the unit to the host sink.
class StagedGrads final : public model::GradSink {
 public:
  StagedGrads(model::GradSink& host, device::ExecutionContext& ctx,
              const model::ModelLayout& layout);
  ~StagedGrads() override;

  float* grad_buffer(int u) override;
  void grad_ready(int u) override;
  int64_t device_bytes() const;
  // The first error of the device work these copies waited for (a failed kernel or copy).
  const Status& status() const { return status_; }

 private:
  model::GradSink& host_;
  device::ExecutionContext& ctx_;
  const model::ModelLayout& layout_;
  std::vector<device::DeviceBuffer> grads_;
  std::vector<float*> host_grads_;  // null: unit not open in this backward
  Status status_;
};

}  // namespace zero::runtime
