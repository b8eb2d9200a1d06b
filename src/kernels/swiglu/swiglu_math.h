// SwiGLU as scalar fp32 math shared by the CUDA kernels and host tests: the formulas of
// swiglu_cpu.cc, out = silu(gate) * up, silu(x) = x * sigmoid(x).
#pragma once

#include <math.h>

#include "kernels/host_device.h"

namespace zero::kernels::math {

ZERO_HOST_DEVICE float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

ZERO_HOST_DEVICE float swiglu(float gate, float up) { return gate * sigmoid(gate) * up; }

struct SwigluGrad {
  float dgate;
  float dup;
};

// silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))).
ZERO_HOST_DEVICE SwigluGrad swiglu_grad(float gate, float up, float dout) {
  const float sig = sigmoid(gate);
  const float silu = gate * sig;
  return {dout * up * sig * (1.0f + gate * (1.0f - sig)), dout * silu};
}

}  // namespace zero::kernels::math
