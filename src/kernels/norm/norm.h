// Global-norm pieces: sum of squares (accumulated in double) and a non-finite flag in one pass,
// so the overflow check is fused into the norm computation (docs/design.md §4).
#pragma once

#include <cstdint>

namespace zero::kernels::cpu {

struct SumSquares {
  double sum_sq = 0.0;
  bool nonfinite = false;  // any inf / NaN seen
};

SumSquares sum_squares(const float* x, int64_t n);

}  // namespace zero::kernels::cpu
