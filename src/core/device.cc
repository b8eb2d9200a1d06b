// probe_cuda(): the one place that decides whether a GPU is usable (see device.h).
#include "core/device.h"

#include <fmt/format.h>

#if defined(ZERO_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace zero {
namespace {

CudaProbe run_probe() {
  CudaProbe p;
#if !defined(ZERO_WITH_CUDA)
  p.why_not = "this build has no CUDA backend (CUDA toolkit not found at configure time)";
#else
  p.built = true;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // 100 (no device) and 35 (driver older than the runtime / no driver) mean "no usable GPU".
    p.why_not = fmt::format("no usable CUDA device: cudaGetDeviceCount: {} (error {})",
                            cudaGetErrorString(err), static_cast<int>(err));
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return p;
  }
  if (count == 0) {
    p.why_not = "no CUDA device visible (CUDA_VISIBLE_DEVICES?)";
    return p;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    p.why_not = "cudaGetDeviceProperties(0) failed";
    (void)cudaGetLastError();
    return p;
  }
  p.available = true;
  p.device_count = count;
  p.name = prop.name;
  p.compute_major = prop.major;
  p.compute_minor = prop.minor;
  p.total_memory_bytes = prop.totalGlobalMem;
#endif
  return p;
}

}  // namespace

const CudaProbe& probe_cuda() {
  static const CudaProbe probe = run_probe();
  return probe;
}

}  // namespace zero
