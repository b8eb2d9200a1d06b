// adam_cuda_test.cc, the GPU test of the fused AdamW, run on the CPU emulator (docs/emu.md) with
// adam_cuda.cu built as plain C++: its small sizes (gpu_or_emulated), bitwise against the CPU Adam.
// Never linked together with the nvcc-built zero_optim (same symbols).
#include "emu/cuda_emu.h"
// The emulator header must come first: it redefines the CUDA keywords the sources use.
#include "optim/adam_cuda.cu"
#include "optim/adam_cuda_test.cc"
