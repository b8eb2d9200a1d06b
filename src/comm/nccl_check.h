// NCCL_CHECK for the GPU communicator (CUDA_CHECK comes from core/cuda/cuda_check.h): maps a failed
// call to a Status (with the call's text and the library's error string) and returns it.
#pragma once

#if defined(ZERO_WITH_NCCL)

#include <cuda_runtime.h>
#include <nccl.h>

#include "core/cuda/cuda_check.h"
#include "core/status.h"

#define NCCL_CHECK(expr)                                                                     \
  do {                                                                                       \
    const ncclResult_t _zero_nccl_res = (expr);                                              \
    if (_zero_nccl_res != ncclSuccess) {                                                     \
      return ::zero::internal_error("{} failed: {} ({}:{})", #expr,                          \
                                    ncclGetErrorString(_zero_nccl_res), __FILE__, __LINE__); \
    }                                                                                        \
  } while (0)

#endif  // ZERO_WITH_NCCL
