// probe_cuda(): the one place that decides whether a GPU is usable (see device.h).
#include "core/device.h"

#include <fmt/format.h>

#include "core/build_info.h"
#include "core/gpu_arch.h"

#if defined(ZERO_WITH_CUDA)
#include <cuda_runtime.h>

#include "core/cuda/cuda_probe.h"
#endif

namespace zero {
namespace {

// nvidia-smi's names for cudaComputeMode 0-3 (nvidia-smi -c takes them).
const char* compute_mode_name(int mode) {
  switch (mode) {
    case 0: return "DEFAULT";
    case 1: return "EXCLUSIVE_THREAD";
    case 2: return "PROHIBITED";
    case 3: return "EXCLUSIVE_PROCESS";
  }
  return "UNKNOWN";
}

constexpr int kCudaErrorInsufficientDriver = 35;
constexpr int kCudaErrorDevicesUnavailable = 46;
constexpr int kComputeModeProhibited = 2;

CudaProbe run_probe() {
#if !defined(ZERO_WITH_CUDA)
  CudaProbe p;
  p.why_not = "this build has no CUDA backend (CUDA toolkit not found at configure time)";
  return p;
#else
  return assess_cuda_facts(cuda::read_cuda_facts(), ZERO_BUILT_CUDA_ARCHITECTURES);
#endif
}

}  // namespace

std::string cuda_version_text(int version) {
  return fmt::format("{}.{}", version / 1000, version % 1000 / 10);
}

CudaProbe assess_cuda_facts(const CudaFacts& f, std::string_view built_architectures) {
  CudaProbe p;
  p.built = true;
  p.built_architectures = built_architectures;
  const std::string runtime = cuda_version_text(f.runtime_version);
  if (f.count_error == kCudaErrorInsufficientDriver && f.driver_version == 0) {
    p.why_not = fmt::format(
        "no NVIDIA driver is loaded (cudaGetDeviceCount: {}, error 35; cudaDriverGetVersion "
        "reports none): install the NVIDIA driver, or use --device cpu",
        f.count_error_text);
    return p;
  }
  // Why before the device count: an older major version cannot run this runtime at all (CUDA's
  // minor version compatibility holds within a major only), and says so only as "error 35".
  if (f.count_error == kCudaErrorInsufficientDriver ||
      f.driver_version / 1000 < f.runtime_version / 1000) {
    p.why_not = fmt::format(
        "the NVIDIA driver supports CUDA {} (cudaDriverGetVersion {}), older than this binary's "
        "CUDA runtime {} ({}): install a driver for CUDA {} or newer (nvidia-smi shows the "
        "CUDA version the driver supports), or build zero with a CUDA toolkit no newer than {}",
        cuda_version_text(f.driver_version), f.driver_version, runtime, f.runtime_version, runtime,
        cuda_version_text(f.driver_version));
    return p;
  }
  if (f.count_error != 0) {
    // 100 (no device) and others mean "no usable GPU".
    p.why_not = fmt::format("no usable CUDA device: cudaGetDeviceCount: {} (error {})",
                            f.count_error_text, f.count_error);
    return p;
  }
  if (f.device_count == 0) {
    p.why_not = "no CUDA device visible (CUDA_VISIBLE_DEVICES?)";
    return p;
  }
  if (!f.have_properties) {
    p.why_not = "cudaGetDeviceProperties(0) failed";
    return p;
  }
  p.device_count = f.device_count;
  p.name = f.name;
  p.compute_major = f.compute_major;
  p.compute_minor = f.compute_minor;
  p.total_memory_bytes = f.total_memory_bytes;
  const std::string gpu =
      fmt::format("GPU 0: {} (sm_{}{})", p.name, f.compute_major, f.compute_minor);
  if (f.compute_mode == kComputeModeProhibited) {
    p.why_not = fmt::format(
        "{}: compute mode PROHIBITED, no process may use it: set it to DEFAULT (nvidia-smi -i 0 -c "
        "DEFAULT, as root) or hide it (CUDA_VISIBLE_DEVICES)",
        gpu);
    return p;
  }
  // Why here: a GPU the kernels were not built for fails only at the first launch ("no kernel
  // image is available"); the probe names the rebuild instead.
  const GpuArchFit fit = check_gpu_arch(built_architectures, f.compute_major, f.compute_minor);
  p.description = fmt::format("{}, {}", gpu, fit.message);
  if (!fit.runs) {
    p.why_not = fmt::format("{}: {}", gpu, fit.message);
    return p;
  }
  // PTX from a newer toolkit than the driver is refused at the first launch
  // (cudaErrorUnsupportedPtxVersion); machine code runs on an older minor version of the driver.
  if (fit.by_jit && f.driver_version < f.runtime_version) {
    p.why_not = fmt::format(
        "{}: this binary has no machine code for it, only PTX, which the driver (CUDA {}) cannot "
        "compile: it comes from the newer CUDA {} toolkit; update the driver, or rebuild with "
        "-DCMAKE_CUDA_ARCHITECTURES={}{}",
        gpu, cuda_version_text(f.driver_version), runtime, f.compute_major, f.compute_minor);
    return p;
  }
  p.available = true;
  return p;
}

Status cuda_device_claim_error(int device, int error, std::string_view error_text,
                               int compute_mode) {
  const bool exclusive = compute_mode == 1 || compute_mode == 3;
  if (error == kCudaErrorDevicesUnavailable && exclusive) {
    return failed_precondition(
        "GPU {} is in compute mode {} and another process already holds it (nvidia-smi lists it): "
        "end or wait for that process, give this rank another GPU (CUDA_VISIBLE_DEVICES), or, for "
        "ranks that share a GPU, set compute mode DEFAULT (nvidia-smi -i {} -c DEFAULT, as root)",
        device, compute_mode_name(compute_mode), device);
  }
  if (error == kCudaErrorDevicesUnavailable && compute_mode == kComputeModeProhibited) {
    return failed_precondition(
        "GPU {} is in compute mode PROHIBITED, no process may use it: set it to DEFAULT "
        "(nvidia-smi -i {} -c DEFAULT, as root) or hide it (CUDA_VISIBLE_DEVICES)",
        device, device);
  }
  return failed_precondition(
      "creating the CUDA context on GPU {} failed: {} (error {}, compute mode {}); nvidia-smi "
      "shows the GPU's state",
      device, error_text, error, compute_mode_name(compute_mode));
}

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
