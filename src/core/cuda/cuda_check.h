// Checks around CUDA and cuBLAS calls, in the two error tiers of STYLE.md §8:
//   CUDA_CHECK(expr)        in functions returning Status / StatusOr: a failure becomes an error
//                           Status naming the call, the CUDA error string and file:line.
//   CUDA_ABORT_IF_ERROR(expr) / CUBLAS_ABORT_IF_ERROR(expr) in void kernel launchers, where a
//                           failure is a bug or a dead device: abort with the same information.
//   CUDA_CHECK_LAUNCH()     after a <<<...>>> launch (launch-configuration errors).
// Compiled only when the CUDA backend is built (ZERO_WITH_CUDA).
#pragma once

#if defined(ZERO_WITH_CUDA)

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "core/status.h"

#define CUDA_CHECK(expr)                                                                     \
  do {                                                                                       \
    const cudaError_t _zero_cuda_err = (expr);                                               \
    if (_zero_cuda_err != cudaSuccess) {                                                     \
      return ::zero::internal_error("{} failed: {} ({}:{})", #expr,                          \
                                    cudaGetErrorString(_zero_cuda_err), __FILE__, __LINE__); \
    }                                                                                        \
  } while (0)

#define CUDA_ABORT_IF_ERROR(expr)                                                            \
  do {                                                                                       \
    const cudaError_t _zero_cuda_err = (expr);                                               \
    if (_zero_cuda_err != cudaSuccess) [[unlikely]] {                                        \
      std::fprintf(stderr, "zero: CUDA error at %s:%d: %s failed: %s\n", __FILE__, __LINE__, \
                   #expr, cudaGetErrorString(_zero_cuda_err));                               \
      std::fflush(stderr);                                                                   \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

#define CUDA_CHECK_LAUNCH() CUDA_ABORT_IF_ERROR(cudaGetLastError())

#if defined(ZERO_CUDA_WITH_CUBLAS)
#include <cublasLt.h>
#include <cublas_v2.h>
#define CUBLAS_ABORT_IF_ERROR(expr)                                                       \
  do {                                                                                    \
    const cublasStatus_t _zero_cublas_st = (expr);                                        \
    if (_zero_cublas_st != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                          \
      std::fprintf(stderr, "zero: cuBLAS error at %s:%d: %s failed: %s (%d)\n", __FILE__, \
                   __LINE__, #expr, cublasGetStatusString(_zero_cublas_st),               \
                   static_cast<int>(_zero_cublas_st));                                    \
      std::fflush(stderr);                                                                \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)
#endif  // ZERO_CUDA_WITH_CUBLAS

#endif  // ZERO_WITH_CUDA
