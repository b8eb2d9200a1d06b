// adamw_cuda_test.cc, the GPU test of the fused AdamW, run on the CPU emulator (docs/emu.md) with
// adamw_cuda.cu built as plain C++: its small sizes (gpu_or_emulated), bitwise against the scalar
// reference (adamw_cpu.cc). Never linked together with the nvcc-built zero_kernel_adamw (same
// symbols).
#include "emu/cuda_emu.h"
// The emulator header must come first: it redefines the CUDA keywords the sources use.
#include "kernels/adamw/adamw_cuda.cu"
#include "kernels/adamw/adamw_cuda_test.cc"
