// The CUDA runtime calls behind probe_cuda() and a rank's first use of its GPU (core/device.h
// decides from what they return): header-only so the same calls run on a GPU and on the CPU
// emulator, whose driver version, compute capability and compute mode a test sets (docs/emu.md).
// Compiled only when the CUDA backend is built (ZERO_WITH_CUDA), and on the emulator.
#pragma once

#if defined(ZERO_WITH_CUDA)

#include <cuda_runtime.h>

#include "core/device.h"
#include "core/status.h"

namespace zero::cuda {

// The driver's and device 0's facts, read without creating a context (a probe must not take a GPU
// that another rank of this node will use: in exclusive mode that would lock the rank out).
inline CudaFacts read_cuda_facts() {
  CudaFacts f;
  cudaDriverGetVersion(&f.driver_version);
  cudaRuntimeGetVersion(&f.runtime_version);
  int count = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    f.count_error = static_cast<int>(err);
    f.count_error_text = cudaGetErrorString(err);
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return f;
  }
  f.device_count = count;
  if (count == 0) return f;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    (void)cudaGetLastError();
    return f;
  }
  f.have_properties = true;
  f.name = prop.name;
  f.compute_major = prop.major;
  f.compute_minor = prop.minor;
  f.total_memory_bytes = prop.totalGlobalMem;
  if (cudaDeviceGetAttribute(&f.compute_mode, cudaDevAttrComputeMode, 0) != cudaSuccess) {
    f.compute_mode = 0;
    (void)cudaGetLastError();
  }
  return f;
}

// Makes GPU `device` current on the calling thread and creates this process's context on it, so a
// GPU another process holds in exclusive mode is a one-line error here, before any work, not an
// abort at the first stream. FAILED_PRECONDITION from cuda_device_claim_error otherwise.
inline Status claim_cuda_device(int device) {
  cudaError_t err = cudaSetDevice(device);
  // Why cudaFree(nullptr): CUDA before 12 creates the context lazily, at the first call that needs
  // it; this is the customary call that does.
  if (err == cudaSuccess) err = cudaFree(nullptr);
  if (err == cudaSuccess) return ok_status();
  (void)cudaGetLastError();
  int mode = 0;
  if (cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, device) != cudaSuccess) {
    mode = 0;
    (void)cudaGetLastError();
  }
  return cuda_device_claim_error(device, static_cast<int>(err), cudaGetErrorString(err), mode);
}

}  // namespace zero::cuda

#endif  // ZERO_WITH_CUDA
