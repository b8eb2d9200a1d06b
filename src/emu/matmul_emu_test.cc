// matmul_cuda_test.cc, the GPU test, run on the CPU emulator (docs/emu.md) with the dense layer's
// host code (matmul_cuda.cc) and kernels (matmul_epilogue_cuda.cu) built as plain C++: cuBLASLt is
// compiled out under ZERO_CUDA_EMU, so every GEMM is reference_gemm plus the epilogue kernels, on
// the test's small shapes (gpu_or_emulated), against the same CPU twin.
// Never linked together with the nvcc-built zero_kernel_matmul (same symbols).
#include "emu/cuda_emu.h"
// The emulator header must come first: it redefines the CUDA runtime calls the test makes. The
// host code and kernels are zero_emu_cuda's objects (src/emu/CMakeLists.txt), linked, not compiled
// here again.
#include "kernels/matmul/matmul_cuda_test.cc"
