// CPU twin of the dense layer: GEMMs through OpenBLAS (cblas), bias and its gradient by hand.
// Legend: N = rows (B*T), C = in_features, OC = out_features. Row-major throughout.
#include <cblas.h>

#include <cstdint>

#include "kernels/matmul/matmul.h"

namespace zero::kernels::cpu {
namespace {

// c(M, Nc) = alpha * op(a) · op(b) + beta * c, row-major; one overload per precision.
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

template <typename T>
void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int64_t N, int64_t C,
                    int64_t OC) {
  if (N == 0 || OC == 0) return;
    // Seed out_NOC with the bias (or zeros) and let the GEMM add inp · weight^T on top (beta = 1).
#pragma omp parallel for
  for (int64_t n = 0; n < N; ++n) {
    T* out_row = out + n * OC;  // (OC)
    for (int64_t o = 0; o < OC; ++o) out_row[o] = bias ? bias[o] : T(0);
  }
  if (C == 0) return;
  gemm(CblasNoTrans, CblasTrans, N, OC, C, T(1), inp, C, weight, C, T(1), out, OC);
}

template <typename T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int64_t N, int64_t C, int64_t OC) {
  if (N == 0 || OC == 0) return;
  if (C > 0) {
    // dinp(N, C) += dout(N, OC) · weight(OC, C)
    if (dinp) gemm(CblasNoTrans, CblasNoTrans, N, C, OC, T(1), dout, OC, weight, C, T(1), dinp, C);
    // dweight(OC, C) += dout(N, OC)^T · inp(N, C)
    if (dweight) {
      gemm(CblasTrans, CblasNoTrans, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);
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
                                    int64_t, int64_t);
template void matmul_forward<double>(double*, const double*, const double*, const double*, int64_t,
                                     int64_t, int64_t);
template void matmul_backward<float>(float*, float*, float*, const float*, const float*,
                                     const float*, int64_t, int64_t, int64_t);
template void matmul_backward<double>(double*, double*, double*, const double*, const double*,
                                      const double*, int64_t, int64_t, int64_t);

}  // namespace zero::kernels::cpu
