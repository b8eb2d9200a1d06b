// device_arena_cuda_test.cc, the GPU test, run on the CPU emulator (docs/emu.md) with
// device_arena_cuda.cc built as plain C++ against the emulated runtime: steady-state reuse without
// cudaMalloc, peak accounting, and out-of-memory as a Status (the emulator refuses a request beyond
// the 80 GiB its cudaMemGetInfo reports).
#include "emu/cuda_emu.h"
// The emulator header must come first: it redefines the CUDA runtime calls the sources use.
#include "core/cuda/device_arena_cuda.cc"
#include "core/cuda/device_arena_cuda_test.cc"
