// CPU twin of the global-norm pieces: Σ x² in double plus a non-finite flag, in one pass.
// Deterministic: fixed-size chunks (independent of the thread count) are summed in parallel, then
// the chunk partials are added in chunk order.
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/norm/norm.h"

namespace zero::kernels::cpu {
namespace {

constexpr int64_t kChunk = 1 << 14;  // elements per partial sum

}  // namespace

SumSquares sum_squares(const float* x, int64_t n) {
  const int64_t num_chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial_sq(static_cast<size_t>(num_chunks));  // (num_chunks)
  std::vector<char> partial_nonfinite(static_cast<size_t>(num_chunks));
#pragma omp parallel for
  for (int64_t k = 0; k < num_chunks; ++k) {
    const int64_t begin = k * kChunk;
    const int64_t end = begin + kChunk < n ? begin + kChunk : n;
    double sum = 0.0;
    bool nonfinite = false;
    for (int64_t i = begin; i < end; ++i) {
      const double v = x[i];
      sum += v * v;
      nonfinite |= !std::isfinite(x[i]);
    }
    partial_sq[k] = sum;
    partial_nonfinite[k] = nonfinite;
  }
  SumSquares result;
  for (int64_t k = 0; k < num_chunks; ++k) {
    result.sum_sq += partial_sq[k];
    result.nonfinite = result.nonfinite || partial_nonfinite[k];
  }
  return result;
}

}  // namespace zero::kernels::cpu
