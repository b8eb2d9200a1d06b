// WidenBuffer: 16-bit working parameters widened to fp32 where the model's kernels read them.
#include "model/param_access.h"

#include "core/check.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/matmul/bf16_gemm.h"

namespace zero::model {

const float* WidenBuffer::widen(const ParamView& view) {
  ZERO_CHECK(view.device == Device::kCpu, "a CPU model got parameters in device memory");
  if (view.dtype == DType::kF32) {
    forget();
    return static_cast<const float*>(view.data);
  }
  // resize() keeps the capacity of an earlier, larger unit: no reallocation after the first step.
  values_.resize(static_cast<size_t>(view.numel));
  // bf16 / fp16 -> fp32 is exact, so the model computes on the values it computed on before the
  // working parameters were kept in the model dtype.
  kernels::cpu::cast_to_f32(view.data, view.dtype, values_.data(), view.numel);
  if (gemm_ != nullptr) {
    if (view.dtype == DType::kBF16) {
      gemm_->set_bf16_source(slot_, values_.data(), static_cast<const uint16_t*>(view.data),
                             view.numel);
    } else {
      forget();
    }
  }
  return values_.data();
}

void WidenBuffer::forget() {
  if (gemm_ != nullptr) gemm_->set_bf16_source(slot_, nullptr, nullptr, 0);
}

}  // namespace zero::model
