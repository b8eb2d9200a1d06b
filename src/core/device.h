// Which compute devices this process can use. Compiled in every build: without the CUDA backend
// probe_cuda() says so; with it, "no GPU" (CUDA errors 100 cudaErrorNoDevice and 35
// cudaErrorInsufficientDriver, or zero devices) is a normal answer, not an error, so GPU tests can
// skip with a clear message and `zero train --device auto` falls back to the CPU. A GPU the binary
// has no code for (built for sm_90, the GPU is sm_80: core/gpu_arch.h) is not usable either.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "core/tensor.h"

namespace zero {

struct CudaProbe {
  bool built = false;      // the CUDA backend is compiled in
  bool available = false;  // at least one usable device
  int device_count = 0;
  std::string name;  // device 0's name, e.g. "NVIDIA H100 80GB HBM3"
  int compute_major = 0, compute_minor = 0;
  size_t total_memory_bytes = 0;
  // CMAKE_CUDA_ARCHITECTURES of this build ("80;90"); empty without the CUDA backend.
  std::string built_architectures;
  // When a device was found: "GPU 0: NVIDIA H100 80GB HBM3 (sm_90), binary built for sm_90"
  // (or, with the refusal, why this binary cannot run on it).
  std::string description;
  std::string why_not;  // when !available: "built without CUDA", "no CUDA device (error 100) ..."
};

// Cached after the first call (device enumeration initialises the CUDA runtime once).
const CudaProbe& probe_cuda();

// `--device` as given on a command line: "cpu" or "cuda"; otherwise an error naming the flag
// ("--device tpu: expected cpu or cuda").
StatusOr<Device> parse_device_flag(std::string_view value);

// Whether the commands can run on `device` here (the CPU always; CUDA when the backend is built and
// probe_cuda() found a usable GPU). Commands call it before printing anything, so the refusal is
// the first thing a user sees: "--device cuda: this build has no CUDA backend ..." or "--device
// cuda: the CUDA backend is built, but there is no usable GPU: <why>".
Status check_device_usable(Device device);

// CUDA builds with a usable GPU: waits for all work queued on the calling thread's current device
// (cudaDeviceSynchronize), e.g. to end a timed region honestly. An error elsewhere.
Status cuda_device_synchronize();

// The calling thread's current device's memory as the driver counts it (cudaMemGetInfo): used
// bytes are every process's allocations and contexts on that GPU, not only this one's.
struct CudaMemoryInfo {
  int64_t used_bytes = 0;
  int64_t total_bytes = 0;
};
StatusOr<CudaMemoryInfo> cuda_memory_info();

}  // namespace zero
