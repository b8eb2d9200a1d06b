// The host-side CUDA runtime calls of the project's kernel launchers and *_cuda_test files, on the
// CPU emulator (docs/emu.md; included by cuda_emu.h): device memory is host memory from the heap
// (so ASan sees a device buffer overrun), copies are memcpy, and since every launch runs to
// completion before it returns, the default stream is always idle: stream and device syncs only
// report the sticky launch error a GPU would report there.
// Not emulated (a call is a compile error): created streams, events, pinned host memory, peer
// copies.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace zero::emu {

// cudaMalloc's 256-byte alignment, so the launchers' vector paths are taken as on a GPU.
inline constexpr size_t kDeviceAlignment = 256;

inline cudaError_t device_malloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  // Why round up: aligned_alloc requires a multiple of the alignment; ASan still sees the rest
  // of the last 256 bytes as addressable, as a GPU allocation's granularity would be.
  const size_t rounded = (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
  *ptr = std::aligned_alloc(kDeviceAlignment, rounded == 0 ? kDeviceAlignment : rounded);
  return *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

inline cudaError_t device_free(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

inline cudaError_t device_memset(void* ptr, int value, size_t bytes) {
  if (bytes > 0) std::memset(ptr, value, bytes);
  return cudaSuccess;
}

inline cudaError_t device_memcpy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memmove(dst, src, bytes);
  return cudaSuccess;
}

// A stream or event handle: a distinct live heap address.
template <typename Handle>
cudaError_t create_handle(Handle* handle) {
  if (handle == nullptr) return cudaErrorInvalidValue;
  *handle = reinterpret_cast<Handle>(new char);
  return cudaSuccess;
}

template <typename Handle>
cudaError_t destroy_handle(Handle handle) {
  delete reinterpret_cast<char*>(handle);
  return cudaSuccess;
}

}  // namespace zero::emu

#define cudaMalloc(ptr, bytes) \
  (::zero::emu::device_malloc(reinterpret_cast<void**>(ptr), static_cast<size_t>(bytes)))
#define cudaFree(ptr) (::zero::emu::device_free(ptr))
#define cudaMemset(ptr, value, bytes) (::zero::emu::device_memset((ptr), (value), (bytes)))
#define cudaMemsetAsync(ptr, value, bytes, ...) \
  (::zero::emu::device_memset((ptr), (value), (bytes)))
#define cudaMemcpy(dst, src, bytes, kind) (::zero::emu::device_memcpy((dst), (src), (bytes)))
#define cudaMemcpyAsync(dst, src, bytes, kind, ...) \
  (::zero::emu::device_memcpy((dst), (src), (bytes)))
// Launches are synchronous, so a sync waits for nothing; it returns (and, like a GPU's sticky
// errors, does not clear) the last launch error.
#define cudaDeviceSynchronize() (::zero::emu::t_last_error)
#define cudaStreamSynchronize(stream) ((void)(stream), ::zero::emu::t_last_error)
#define cudaStreamCreate(stream) (::zero::emu::create_handle(stream))
#define cudaStreamCreateWithFlags(stream, flags) (::zero::emu::create_handle(stream))
#define cudaStreamDestroy(stream) (::zero::emu::destroy_handle(stream))
#define cudaEventCreate(event) (::zero::emu::create_handle(event))
#define cudaEventCreateWithFlags(event, flags) (::zero::emu::create_handle(event))
#define cudaEventDestroy(event) (::zero::emu::destroy_handle(event))
#define cudaEventRecord(event, ...) ((void)(event), cudaSuccess)
#define cudaEventQuery(event) ((void)(event), cudaSuccess)
#define cudaEventSynchronize(event) ((void)(event), ::zero::emu::t_last_error)
#define cudaStreamWaitEvent(stream, event, ...) ((void)(stream), (void)(event), cudaSuccess)
