// probe_cuda(): the one place that decides whether a GPU is usable (see device.h).
#include "core/device.h"

#include <fmt/format.h>

#include "core/build_info.h"
#include "core/gpu_arch.h"

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
  p.built_architectures = ZERO_BUILT_CUDA_ARCHITECTURES;
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
  p.device_count = count;
  p.name = prop.name;
  p.compute_major = prop.major;
  p.compute_minor = prop.minor;
  p.total_memory_bytes = prop.totalGlobalMem;
  // Why here: a GPU the kernels were not built for fails only at the first launch ("no kernel
  // image is available"); the probe names the rebuild instead.
  const GpuArchFit fit = check_gpu_arch(p.built_architectures, prop.major, prop.minor);
  p.description =
      fmt::format("GPU 0: {} (sm_{}{}), {}", p.name, prop.major, prop.minor, fit.message);
  if (!fit.runs) {
    p.why_not = fmt::format("GPU 0: {} (sm_{}{}): {}", p.name, prop.major, prop.minor, fit.message);
    return p;
  }
  p.available = true;
#endif
  return p;
}

}  // namespace

const CudaProbe& probe_cuda() {
  static const CudaProbe probe = run_probe();
  return probe;
}

StatusOr<Device> parse_device_flag(std::string_view value) {
  if (value == "cpu") return Device::kCpu;
  if (value == "cuda") return Device::kCuda;
  return invalid_argument("--device {}: expected cpu or cuda", value);
}

Status check_device_usable(Device device) {
  if (device == Device::kCpu) return Status();
  const CudaProbe& p = probe_cuda();
  if (!p.built) {
    return failed_precondition(
        "--device cuda: this build has no CUDA backend (configure with nvcc installed, or "
        "-DZERO_CUDA=ON); use --device cpu");
  }
  if (!p.available) {
    return failed_precondition(
        "--device cuda: the CUDA backend is built, but there is no usable "
        "GPU: {}",
        p.why_not);
  }
  return Status();
}

Status cuda_device_synchronize() {
#if defined(ZERO_WITH_CUDA)
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    return internal_error("cudaDeviceSynchronize: {} (error {})", cudaGetErrorString(err),
                          static_cast<int>(err));
  }
  return Status();
#else
  return failed_precondition("cudaDeviceSynchronize: this build has no CUDA backend");
#endif
}

StatusOr<CudaMemoryInfo> cuda_memory_info() {
#if defined(ZERO_WITH_CUDA)
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (err != cudaSuccess) {
    return internal_error("cudaMemGetInfo: {} (error {})", cudaGetErrorString(err),
                          static_cast<int>(err));
  }
  return CudaMemoryInfo{static_cast<int64_t>(total_bytes - free_bytes),
                        static_cast<int64_t>(total_bytes)};
#else
  return failed_precondition("cudaMemGetInfo: this build has no CUDA backend");
#endif
}

}  // namespace zero
