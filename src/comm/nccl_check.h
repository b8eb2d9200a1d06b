// CUDA_CHECK / NCCL_CHECK for the GPU communicator: map a failed call to a Status (with the call's
// text and the library's error string) and return it from the enclosing function.
#pragma once

#if defined(ZERO_WITH_NCCL)

#include <cuda_runtime.h>
#include <nccl.h>

#include "core/status.h"

#define CUDA_CHECK(expr)                                                                     \
  do {                                                                                       \
    const cudaError_t _zero_cuda_err = (expr);                                               \
    if (_zero_cuda_err != cudaSuccess) {                                                     \
      return ::zero::internal_error("{} failed: {} ({}:{})", #expr,                          \
                                    cudaGetErrorString(_zero_cuda_err), __FILE__, __LINE__); \
    }                                                                                        \
  } while (0)

#define NCCL_CHECK(expr)                                                                     \
  do {                                                                                       \
    const ncclResult_t _zero_nccl_res = (expr);                                              \
    if (_zero_nccl_res != ncclSuccess) {                                                     \
      return ::zero::internal_error("{} failed: {} ({}:{})", #expr,                          \
                                    ncclGetErrorString(_zero_nccl_res), __FILE__, __LINE__); \
    }                                                                                        \
  } while (0)

#endif  // ZERO_WITH_NCCL
