// Global-norm gradient clipping as DeepSpeed's ZeRO optimizers do it, folded together with loss
// unscaling into the one multiplier that adam_update / lamb_update apply to the raw gradients.
#pragma once

namespace zero::optim {

struct GradScaling {
  double grad_norm;       // unscaled global L2 norm (what DeepSpeed reports); -1 if non-finite
  double clip_divisor;    // >= 1: how much clipping shrinks the unscaled grads
  float grad_multiplier;  // 1 / (loss_scale * clip_divisor), rounded once to float
  bool finite;            // false: the scaled norm was inf/NaN (the step must be skipped)
};

// `scaled_grad_norm`: global L2 norm of the gradients as they are stored, i.e. still multiplied by
// `loss_scale` (DeepSpeed sums per-tensor squared norms in fp64, all-reduces, takes the sqrt).
// `gradient_clipping`: the top-level key; <= 0 disables clipping (DeepSpeed's default is 0.0).
//   clip_divisor = max(1, (scaled_norm / loss_scale + 1e-6) / gradient_clipping)
//   grad_multiplier = 1 / (loss_scale * clip_divisor)
// Equivalent to torch.nn.utils.clip_grad_norm_'s max_norm / (norm + 1e-6) clamped to 1, applied
// only when norm + 1e-6 > max_norm. A non-finite norm becomes DeepSpeed's -1 sentinel, which
// leaves the divisor at 1.
// REQUIRES: loss_scale > 0.
GradScaling grad_scaling(double scaled_grad_norm, double loss_scale, double gradient_clipping);

}  // namespace zero::optim
