// CPU twin of the dense layer: GEMMs through OpenBLAS (cblas), bias and its gradient by hand.
// Legend: N = rows (B*T), C = in_features, OC = out_features. Row-major throughout.
#include <cblas.h>

#include <cstdint>

#include "core/check.h"
#include "kernels/matmul/bf16_gemm.h"
#include "kernels/matmul/matmul.h"

namespace zero::kernels::cpu {
namespace {

// c(M, Nc) += op(a) · op(b), row-major; one overload per precision. The one dispatch point
// between OpenBLAS and the bf16 GEMM.
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, const float* a,
          int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, Bf16Gemm* bf16_gemm) {
  if (bf16_gemm) {
    bf16_gemm->gemm(ta == CblasTrans, tb == CblasTrans, m, n, k, a, lda, b, ldb, c, ldc);
    return;
  }
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 1.0f, c, ldc);
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, const double* a,
          int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc, Bf16Gemm* bf16_gemm) {
  ZERO_CHECK(bf16_gemm == nullptr, "the bf16 GEMM takes fp32 operands, not fp64");
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 1.0, c, ldc);
}

}  // namespace

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C,
                    int64_t OC, Bf16Gemm* bf16_gemm) {
  if (N == 0 || OC == 0) return;
    // Seed out_NOC with the bias (or zeros) and let the GEMM add inp · weight^T on top (beta = 1).
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    T* out_row = out + n * OC;  // (OC)
    for (int64_t o = 0; o < OC; ++o) out_row[o] = bias ? bias[o] : T(0);
  }
  if (C == 0) return;
  gemm(CblasNoTrans, CblasTrans, N, OC, C, inp, C, weight, C, out, OC, bf16_gemm);
}

template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int64_t N, int64_t C, int64_t OC, Bf16Gemm* bf16_gemm) {
  if (N == 0 || OC == 0) return;
  if (C > 0) {
    // dinp(N, C) += dout(N, OC) · weight(OC, C)
    if (dinp) gemm(CblasNoTrans, CblasNoTrans, N, C, OC, dout, OC, weight, C, dinp, C, bf16_gemm);
    // dweight(OC, C) += dout(N, OC)^T · inp(N, C)
    if (dweight) {
      gemm(CblasTrans, CblasNoTrans, OC, C, N, dout, OC, inp, C, dweight, C, bf16_gemm);
    }
  }
  if (dbias) {
    // Parallel over blocks of output channels, rows summed in order within each block, so the
    // result does not depend on the thread count; a block keeps the row reads contiguous.
    constexpr int64_t kBlock = 64;
    const int64_t num_blocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for
    for (int64_t blk = 0; blk < num_blocks; ++blk) {
      const int64_t o0 = blk * kBlock;
      const int64_t width = OC - o0 < kBlock ? OC - o0 : kBlock;
      T sum[kBlock] = {};
      for (int64_t n = 0; n < N; ++n) {
        const T* dout_row = dout + n * OC + o0;  // (width)
        for (int64_t j = 0; j < width; ++j) sum[j] += dout_row[j];
      }
      for (int64_t j = 0; j < width; ++j) dbias[o0 + j] += sum[j];
    }
  }
}

template void matmul_forward<float>(float*, const float*, const float*, const float*, int64_t,
                                    int64_t, int64_t, Bf16Gemm*);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int64_t,
                                     int64_t, int64_t, Bf16Gemm*);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int64_t, int64_t, int64_t, Bf16Gemm*);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, int64_t, int64_t, int64_t, Bf16Gemm*);

}  // namespace zero::kernels::cpu
