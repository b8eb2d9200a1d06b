// The one tolerance table for CUDA kernels against their CPU twins (STYLE.md §12, as
// TransformerEngine does it). A CUDA result x matches the CPU reference y when
//   |x - y| <= atol + rtol * |y|   elementwise, or, for reductions over K terms,
// the error norm is within rtol of the reference norm (see cuda_test_util.h).
// Storage dtype decides: fp32 differs from the CPU only by summation order and fused multiply-add;
// bf16 / fp16 outputs carry one rounding of the output (2^-8 / 2^-11 relative) plus inputs that
// were rounded on the way in.
#pragma once

#include "core/dtype.h"

namespace zero::kernels {

struct Tolerance {
  double rtol;
  double atol;
};

constexpr Tolerance tolerance_for(DType storage) {
  switch (storage) {
    case DType::kF32: return {1e-5, 1e-6};
    case DType::kBF16: return {1.6e-2, 1e-3};  // ~2 ulp of bf16 (2^-7 = 7.8e-3 per ulp)
    case DType::kF16: return {2e-3, 1e-4};     // ~2 ulp of fp16 (2^-10 = 9.8e-4 per ulp)
  }
  return {1e-5, 1e-6};
}

// Matmuls and attention sum K products: tensor-core accumulation order adds error growing with
// sqrt(K); the comparison for them is on the relative error norm, with these bounds.
constexpr double norm_rtol_for(DType storage) {
  switch (storage) {
    case DType::kF32: return 1e-5;  // TF32 is disabled for fp32 (CUBLAS_COMPUTE_32F, no fast mode)
    case DType::kBF16: return 8e-3;
    case DType::kF16: return 1e-3;
  }
  return 1e-5;
}

}  // namespace zero::kernels
