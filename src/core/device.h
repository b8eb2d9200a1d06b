// Which compute devices this process can use. Compiled in every build: without the CUDA backend
// probe_cuda() says so; with it, "no GPU" (CUDA errors 100 cudaErrorNoDevice and 35
// cudaErrorInsufficientDriver, or zero devices) is a normal answer, not an error, so GPU tests can
// skip with a clear message and `zero train --device auto` falls back to the CPU.
#pragma once

#include <string>

namespace zero {

struct CudaProbe {
  bool built = false;      // the CUDA backend is compiled in
  bool available = false;  // at least one usable device
  int device_count = 0;
  std::string name;  // device 0's name, e.g. "NVIDIA H100 80GB HBM3"
  int compute_major = 0, compute_minor = 0;
  size_t total_memory_bytes = 0;
  std::string why_not;  // when !available: "built without CUDA", "no CUDA device (error 100) ..."
};

// Cached after the first call (device enumeration initialises the CUDA runtime once).
const CudaProbe& probe_cuda();

}  // namespace zero
