// layernorm_cuda.cu, unchanged, built as plain C++ on the CPU emulator (cuda_emu.h, docs/emu.md):
// defines zero::kernels::cuda::layernorm_forward / layernorm_backward for layernorm_emu_test.
// Never linked together with the nvcc-built zero_kernel_layernorm (same symbols).
#include "emu/cuda_emu.h"
// The emulator header must come first: it redefines the CUDA keywords the .cu file uses.
#include "kernels/layernorm/layernorm_cuda.cu"
