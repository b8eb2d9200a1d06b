// The seam between the model and ZeRO: the model asks ParamAccess for a unit's parameters and hands
// gradients to a GradSink; it knows nothing of sharding, gathering, offload or reduction.
#pragma once

namespace zero::model {

class ParamAccess {
 public:
  virtual ~ParamAccess() = default;
  // Full fp32 values of unit `u` laid out as ModelLayout::unit(u) (a 16-bit model sees its values
  // rounded to that dtype). Valid until the matching release(u). acquire/release pairs nest: the
  // tied head acquires the embedding unit while the final unit is held.
  virtual const float* acquire(int u) = 0;
  virtual void release(int u) = 0;
};

class GradSink {
 public:
  virtual ~GradSink() = default;
  // fp32 gradient buffer for unit `u` (same layout as its parameters); the model ACCUMULATES into
  // it. The buffer is zero before the first call of a backward pass.
  virtual float* grad_buffer(int u) = 0;
  // The model will not touch unit u's gradient again in this backward pass (time to reduce it).
  virtual void grad_ready(int u) = 0;
};

}  // namespace zero::model
