// Clip coefficient and combined unscale multiplier (see grad_clip.h).
#include "optim/grad_clip.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace zero::optim {

GradScaling grad_scaling(double scaled_grad_norm, double loss_scale, double gradient_clipping) {
  ZERO_CHECK(loss_scale > 0, "loss scale must be > 0, got ", loss_scale);
  GradScaling s;
  s.finite = std::isfinite(scaled_grad_norm);
  const double norm = s.finite ? scaled_grad_norm : -1.0;  // DeepSpeed's sentinel
  s.grad_norm = s.finite ? norm / loss_scale : -1.0;
  s.clip_divisor = 1.0;
  if (gradient_clipping > 0) {
    s.clip_divisor = std::max(1.0, (norm / loss_scale + 1e-6) / gradient_clipping);
  }
  s.grad_multiplier = static_cast<float>(1.0 / (loss_scale * s.clip_divisor));
  return s;
}

}  // namespace zero::optim
