// ZERO_LAUNCH: the one kernel-launch spelling of the project's .cu files, so that the same source
// builds with nvcc (a real <<<...>>> launch) and, as plain C++, with the CPU emulator (src/emu/,
// docs/emu.md), which runs every CUDA thread as a host thread:
//   ZERO_LAUNCH(grid, block, smem_bytes, stream, kernel<T, kPack>)(args...);
// The kernel comes last so that a template-id with commas needs no extra parentheses.
// ZERO_EXTERN_SHARED(T, name) declares the block's dynamic shared memory (16-byte aligned).
#pragma once

#if defined(ZERO_CUDA_EMU)
#define ZERO_LAUNCH(grid, block, smem_bytes, stream, ...) \
  ::zero::emu::Launcher((__VA_ARGS__), (grid), (block), (smem_bytes), (stream))
#define ZERO_EXTERN_SHARED(T, name) T* name = ::zero::emu::dynamic_shared<T>()
#else
#define ZERO_LAUNCH(grid, block, smem_bytes, stream, ...) \
  __VA_ARGS__<<<(grid), (block), (smem_bytes), (stream)>>>
#define ZERO_EXTERN_SHARED(T, name) extern __shared__ __align__(16) T name[]
#endif
