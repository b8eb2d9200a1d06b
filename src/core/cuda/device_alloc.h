// device_alloc_or_exit: cudaMalloc for a named buffer. When the device cannot give the bytes — a
// real out-of-memory, or the ZERO_DEVICE_MEMORY_LIMIT budget (core/device_memory_budget.h) — it
// prints one line naming the buffer, the bytes asked, the memory plan's figure for it and what the
// device had, and ends the process at once with exit status 1: under mpirun / zero launch a rank
// that exits non-zero ends the job, so no peer is left waiting in a collective. (The allocation
// sites are void functions deep in a step; aborting, as CUDA_ABORT_IF_ERROR does, named only the
// expression and dumped core.)
// try_device_alloc is the same check returning the failure, for callers with a Status to return
// (the CUDA backend's allocate()).
// Compiled only when the CUDA backend is built (ZERO_WITH_CUDA), and on the emulator.
#pragma once

#if defined(ZERO_WITH_CUDA)

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "core/device_memory_budget.h"

namespace zero::cuda {

struct DeviceAllocRequest {
  std::string_view what;  // names the buffer in the message
  size_t bytes = 0;
  int64_t planned_bytes = -1;  // the memory plan's figure for this buffer (-1: none)
  std::string_view advice;     // the setting to change
};

// Device memory of r.bytes (> 0) on the current device, or nullptr with `*f` saying why (the
// ZERO_DEVICE_MEMORY_LIMIT budget, or cudaMalloc's error).
inline void* try_device_alloc(const DeviceAllocRequest& r, DeviceAllocFailure* f) {
  *f = DeviceAllocFailure{};
  f->what = r.what;
  f->bytes = static_cast<int64_t>(r.bytes);
  f->planned_bytes = r.planned_bytes;
  f->advice = r.advice;
  cudaGetDevice(&f->device);
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    f->free_bytes = static_cast<int64_t>(free_bytes);
    f->total_bytes = static_cast<int64_t>(total_bytes);
  }
  void* p = nullptr;
  const std::optional<int64_t> limit = device_memory_limit_from_env();
  const int64_t in_use = f->total_bytes >= 0 ? f->total_bytes - f->free_bytes : 0;
  if (limit && in_use + f->bytes > *limit) {
    f->limit_bytes = limit;
  } else if (const cudaError_t err = cudaMalloc(&p, r.bytes); err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error before reporting
    f->cuda_error = cudaGetErrorString(err);
  } else {
    return p;
  }
  return nullptr;
}

// Returns device memory of r.bytes (> 0) on the current device, or does not return.
inline void* device_alloc_or_exit(const DeviceAllocRequest& r) {
  DeviceAllocFailure f;
  if (void* p = try_device_alloc(r, &f)) return p;
  std::fprintf(stderr, "%s\n", device_alloc_failure_message(f).c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace zero::cuda

#endif  // ZERO_WITH_CUDA
