// Whether a binary built for some CUDA architectures (CMAKE_CUDA_ARCHITECTURES, e.g. "80;90") can
// run on a GPU of a given compute capability: probe_cuda() asks it for device 0, so a build for
// sm_90 on an sm_80 GPU is a clear refusal naming the rebuild flag, not "no kernel image is
// available" at the first launch. Pure (no CUDA calls): tested on the CPU.
//
// The rules are CUDA's (CUDA C++ Programming Guide, "Binary Compatibility" / "PTX Compatibility"):
// machine code (SASS) for sm_XY runs on X.Z for Z >= Y only (same major); PTX for compute_XY is
// JIT-compiled by the driver for any X.Y or newer; the arch-specific "a" / family "f" targets run
// only on their own major.minor. CMake's "90" means both sm_90 SASS and compute_90 PTX,
// "90-real" SASS only, "90-virtual" PTX only.
#pragma once

#include <string>
#include <string_view>

namespace zero {

struct GpuArchFit {
  bool runs = false;
  // Runs only through the driver's JIT of the PTX (no SASS for this GPU): slower first launches.
  bool by_jit = false;
  // runs: "binary built for sm_90" (plus the JIT note); else the refusal, e.g. "built for sm_90,
  // this GPU is sm_80: rebuild with -DCMAKE_CUDA_ARCHITECTURES=80".
  std::string message;
};

// `built`: CMAKE_CUDA_ARCHITECTURES as configured ("80;90", "90a", "86-real", "all", "native").
// Values that name no fixed list ("all", "all-major", "native", empty) are taken to run, and say
// so. `major`.`minor`: the GPU's compute capability.
GpuArchFit check_gpu_arch(std::string_view built, int major, int minor);

}  // namespace zero
