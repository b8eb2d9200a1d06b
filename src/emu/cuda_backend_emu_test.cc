// cuda_backend_test.cc, the CUDA backend against the Backend contract, run on the CPU emulator
// (docs/emu.md): device/cuda_stream.cc and device/cuda_backend.cc built as plain C++ on the
// emulated runtime (streams as worker threads with random delays, events, async copies, pinned
// memory, host functions). The backend, the streams and the kernels (elementwise, sum of squares,
// AdamW) are zero_emu_cuda's objects (src/emu/CMakeLists.txt), linked, not compiled here again.
// Never linked with the nvcc-built zero_device (same symbols).
#include "emu/cuda_emu.h"
// The emulator header must come first: it redefines the CUDA runtime calls the test makes.
#include "device/cuda_backend_test.cc"
