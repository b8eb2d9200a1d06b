// The CUDA kernels the CUDA backend queues (device/cuda_backend.cc), built as plain C++ on the CPU
// emulator for cuda_backend_emu_test (docs/emu.md).
#include "emu/cuda_emu.h"
// The emulator header must come first: it redefines the CUDA keywords the sources use.
#include "kernels/adamw/adamw_cuda.cu"
#include "kernels/elementwise/elementwise_cuda.cu"
#include "kernels/norm/norm_cuda.cu"
