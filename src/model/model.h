// Model: what the engine needs of a decoder model, whatever device runs it. Transformer is the CPU
// implementation (the oracle); CudaTransformer (model/cuda_transformer.h, CUDA builds) runs the
// same math with the CUDA kernels. Both ask a ParamAccess for each unit's parameters (a typed
// ParamView: a 16-bit model's units in its dtype) and hand fp32 gradients to a GradSink — on the
// device the model runs on — and know nothing of ZeRO.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/param_access.h"
#include "model/param_layout.h"

namespace zero::model {

class Model {
 public:
  virtual ~Model() = default;

  virtual const ModelLayout& layout() const = 0;
  // Where parameters, gradients and activations live (ParamAccess / GradSink pointers must be
  // memory of this device).
  virtual Device device() const = 0;

  // Forward over host tokens (B, T); with targets (B, T) returns the mean token cross-entropy over
  // targets != -100 (0 if none), without them only the logits are computed.
  virtual float forward(ParamAccess& params, const int32_t* tokens, const int32_t* targets,
                        int64_t B, int64_t T) = 0;
  // Targets counted by the last forward.
  virtual int64_t counted_targets() const = 0;
  // Backward of the last forward's loss with d(loss)/d(token loss) = dloss_per_token; accumulates
  // into the GradSink's buffers and calls grad_ready(u) once per unit.
  virtual void backward(ParamAccess& params, GradSink& grads, float dloss_per_token) = 0;
  // Logits (V floats) of position t of batch row b of the last forward, copied to `out` (host).
  virtual void logits_at(int64_t b, int64_t t, float* out) const = 0;
  // Bytes of the activation buffers the last forward allocated.
  virtual int64_t buffer_bytes() const = 0;
};

}  // namespace zero::model
