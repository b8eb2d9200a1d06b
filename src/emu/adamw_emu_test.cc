// adamw_cuda_test.cc, the GPU test of the fused AdamW, run on the CPU emulator (docs/emu.md) with
// adamw_cuda.cu built as plain C++: its small sizes (gpu_or_emulated), bitwise against the scalar
// reference (adamw_cpu.cc). Never linked together with the nvcc-built zero_kernel_adamw (same
// symbols).
#include "emu/cuda_emu.h"
// The emulator header must come first: it redefines the CUDA runtime calls the test makes. The
// kernels are zero_emu_cuda's objects (src/emu/CMakeLists.txt), linked, not compiled here again.
#include "kernels/adamw/adamw_cuda_test.cc"
