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

// What the CUDA runtime says about the driver and device 0 before any context exists (read by
// core/cuda/cuda_probe.h, on a GPU and on the emulator); assess_cuda_facts decides from it alone.
struct CudaFacts {
  int count_error = 0;           // cudaGetDeviceCount's error code (0: none)
  std::string count_error_text;  // its cudaGetErrorString
  int device_count = 0;
  int driver_version = 0;        // cudaDriverGetVersion: 12040 is CUDA 12.4; 0: no driver loaded
  int runtime_version = 0;       // cudaRuntimeGetVersion: the runtime this binary was linked with
  bool have_properties = false;  // cudaGetDeviceProperties(0) answered
  std::string name;
  int compute_major = 0, compute_minor = 0;
  size_t total_memory_bytes = 0;
  int compute_mode = 0;  // cudaComputeMode of device 0 (cudaDevAttrComputeMode)
};

// The probe's verdict on `facts` for a binary built for `built_architectures`. Refuses, each with
// one line saying what to do: a driver older than the runtime (an older major version, or error
// 35), a GPU in compute mode Prohibited, a GPU the binary has no code for (core/gpu_arch.h), PTX
// the driver is too old to compile. Pure: tested without a GPU.
CudaProbe assess_cuda_facts(const CudaFacts& facts, std::string_view built_architectures);

// "12.4" for CUDA's 12040.
std::string cuda_version_text(int version);

// Why this process could not create its context on GPU `device` (cudaSetDevice / cudaFree(0)
// failed with `error`, `error_text`), as one line with what to do: in exclusive compute mode it
// names the mode and the other process that holds the GPU. Pure; core/cuda/cuda_probe.h's
// claim_cuda_device calls it.
Status cuda_device_claim_error(int device, int error, std::string_view error_text,
                               int compute_mode);

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
