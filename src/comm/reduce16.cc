// Reference reductions (fp32 accumulation, one rounding).
#include "comm/reduce16.h"

#include <algorithm>
#include <vector>

namespace zero {

void accumulate_f32(const float* src, float* acc, size_t numel, ReduceOp op) {
  if (op == ReduceOp::kSum) {
    for (size_t i = 0; i < numel; ++i) acc[i] += src[i];
  } else {
    for (size_t i = 0; i < numel; ++i) acc[i] = std::max(acc[i], src[i]);
  }
}

void reduce_reference(std::span<const void* const> inputs, void* out, size_t numel, DType dtype,
                      ReduceOp op) {
  if (inputs.empty() || numel == 0) return;
  std::vector<float> acc(numel);
  std::vector<float> widened(numel);
  convert_to_f32(inputs[0], dtype, acc.data(), numel);
  for (size_t r = 1; r < inputs.size(); ++r) {
    convert_to_f32(inputs[r], dtype, widened.data(), numel);
    accumulate_f32(widened.data(), acc.data(), numel, op);
  }
  convert_from_f32(acc.data(), out, dtype, numel);
}

}  // namespace zero
