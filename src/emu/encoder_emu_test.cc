// encoder_cuda_test.cc, the GPU test, run on the CPU emulator (docs/emu.md) with encoder_cuda.cu
// built as plain C++: its small shapes (gpu_or_emulated), against the same CPU twin. Never linked
// together with the nvcc-built zero_kernel_encoder (same symbols).
#include "emu/cuda_emu.h"
// The emulator header must come first: it redefines the CUDA runtime calls the test makes. The
// kernels are zero_emu_cuda's objects (src/emu/CMakeLists.txt), linked, not compiled here again.
#include "kernels/encoder/encoder_cuda_test.cc"
