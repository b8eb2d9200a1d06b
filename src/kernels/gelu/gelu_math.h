// GELU, tanh approximation, as scalar fp32 math shared by the CUDA kernels (gelu, the dense
// layer's GELU epilogue) and host tests: the formula of gelu_cpu.cc,
// y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x³).
#pragma once

#include <math.h>

#include "kernels/host_device.h"

namespace zero::kernels::math {

inline constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;  // sqrt(2/pi)
inline constexpr float kGeluCubic = 0.044715f;

ZERO_HOST_DEVICE float gelu_tanh(float x) {
  const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

// d gelu / dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh² u) du/dx, du/dx = sqrt(2/pi) (1 + 3 * 0.044715
// x²).
ZERO_HOST_DEVICE float gelu_tanh_grad(float x) {
  const float u = kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x);
  const float t = tanhf(u);
  const float du_dx = kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du_dx;
}

}  // namespace zero::kernels::math
