// LAMB update with DeepSpeed FusedLamb semantics: Adam moments, then one trust ratio per parameter
// tensor, ||w|| / ||update|| clamped to [min_coeff, max_coeff] (1 when either norm is 0).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "optim/adam.h"

namespace zero::optim {

// Hyper-parameters of one LAMB update of one param group; `step` is 1 on the first update.
struct LambArgs {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float max_coeff = 10.0f;
  float min_coeff = 0.01f;
  int64_t step = 1;
  bool bias_correction = true;
  bool eps_inside_sqrt = false;  // true: d = sqrt(v + eps); false: d = sqrt(v) + eps
};

// One LAMB step over a shard holding several whole parameter tensors. Tensor i spans elements
// [tensor_offsets[i], tensor_offsets[i+1]); tensor_offsets starts at 0 and ends at shard.numel.
// Per element (fp32; note eps and v are NOT bias-corrected, unlike Adam — FusedLamb folds
// sqrt(bc2)/bc1 into the step size):
//   g = grad * grad_scale ; m = b1*m + (1-b1)*g ; v = b2*v + (1-b2)*g^2
//   u = m / d + wd * p                        (d per eps_inside_sqrt)
// Per tensor: ratio = clamp(||p|| / ||u||, min_coeff, max_coeff), or 1 if a norm is 0;
//   p -= lr * sqrt(bc2) / bc1 * ratio * u     (lr alone without bias_correction)
// Norms are accumulated in double over fixed chunks, so results do not depend on the thread count.
// Returns the trust ratio of each tensor (DeepSpeed's `lamb_coeffs`).
// Under ZeRO a "tensor" is whatever the caller passes: DeepSpeed hands FusedLamb one flat
// partition, making the ratio per-partition; passing real tensor boundaries keeps LAMB's meaning.
std::vector<float> lamb_update(const LambArgs& args, const AdamShard& shard,
                               std::span<const int64_t> tensor_offsets, float grad_scale);

}  // namespace zero::optim
