// The host-side CUDA runtime calls of the project's kernel launchers and *_cuda_test files, on the
// CPU emulator (docs/emu.md; included by cuda_emu.h): device memory is host memory from the heap
// (so ASan sees a device buffer overrun); streams are in-order queues with their own worker
// threads (stream_emu.h), and each call is as synchronous as CUDA documents it ("API
// synchronization behavior"), taking the weakest reading where the documentation allows several:
//   - kernel launches, cudaMemsetAsync, cudaMemcpyAsync (any direction but host to host),
//     cudaEventRecord, cudaStreamWaitEvent and cudaLaunchHostFunc queue on their stream;
//   - cudaMemset and device-to-device cudaMemcpy queue on the legacy default stream;
//   - host-to-device cudaMemcpy copies the host buffer to a staging buffer and returns; the device
//     write is queued on the legacy stream and may land later;
//   - device-to-host cudaMemcpy queues on the legacy stream and returns once its copy has run;
//   - cudaSetDevice picks the calling thread's device (stream_emu.h: streams and the legacy
//     stream are per device, memory is shared);
//   - cudaFree waits for the whole device first (a GPU's cudaFree synchronises too; here a kernel
//     still queued would read freed memory);
//   - the synchronize calls wait as documented and return the sticky launch error;
//   - cudaMemGetInfo reports a fixed capacity less what cudaMalloc gave out on the caller's
//     device (the heap itself is not measured);
//   - the driver's and the GPUs' facts (versions, compute capability and mode) are what a test set
//     in emulated_gpus(); cudaGetDeviceCount and cudaSetDevice fail as CUDA would under them;
//   - cudaHostAlloc / cudaMallocHost ("pinned" memory) are ordinary host memory: cudaMemcpyAsync
//     already reads and writes host memory when its stream gets there, as a pinned copy does;
//     cudaFreeHost waits for the caller's device first, as cudaFree.
// Not emulated (a compile error or an abort): cudaHostRegister, peer copies, cudaMemcpyDefault,
// the per-thread default stream. Event timing is the host's clock when a stream runs the record.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "emu/stream_emu.h"  // IWYU pragma: export

namespace zero::emu {

// cudaGetLastError's sticky-until-read error of the calling host thread.
inline thread_local cudaError_t t_last_error = cudaSuccess;

[[noreturn]] inline void not_emulated(const char* what) {
  std::fprintf(stderr, "zero emu: not emulated: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

// The stream a handle names: 0 and cudaStreamLegacy are the legacy default stream.
inline Stream& stream_of(cudaStream_t handle) {
  if (handle == nullptr || handle == cudaStreamLegacy) return Stream::legacy();
  if (handle == cudaStreamPerThread) not_emulated("the per-thread default stream");
  return *reinterpret_cast<Stream*>(handle);
}

// cudaMalloc's 256-byte alignment, so the launchers' vector paths are taken as on a GPU.
inline constexpr size_t kDeviceAlignment = 256;

// The emulated device's memory: cudaMemGetInfo's total, and the most one cudaMalloc may ask for.
inline constexpr size_t kEmulatedDeviceBytes = size_t{80} << 30;

// Heap memory for a device or pinned allocation.
// Why round up: aligned_alloc requires a multiple of the alignment; ASan still sees the rest of
// the last 256 bytes as addressable, as a GPU allocation's granularity would be.
inline size_t rounded_bytes(size_t bytes) {
  const size_t rounded = (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
  return rounded == 0 ? kDeviceAlignment : rounded;
}

// Each device's memory in use (cudaMalloc'd, not yet freed), so cudaMemGetInfo reports what is
// left and ZERO_DEVICE_MEMORY_LIMIT (core/device_memory_budget.h) acts as on a GPU. Never
// destroyed: late frees from static destructors still find it.
struct DeviceMemory {
  std::mutex mu;
  std::array<size_t, kNumDevices> used_bytes{};              // guarded by mu
  std::unordered_map<void*, std::pair<int, size_t>> blocks;  // pointer -> device, bytes; by mu
};

inline DeviceMemory& device_memory() {
  static DeviceMemory* memory = new DeviceMemory;
  return *memory;
}

// cudaMalloc on the calling thread's device. Why a budget per device: a request beyond what the
// device has left (what cudaMemGetInfo reports) fails as on a GPU, whatever the host could map
// (DeviceArena's out-of-memory test asks for 1 PiB).
inline cudaError_t device_malloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  *ptr = nullptr;
  const int device = t_current_device;
  DeviceMemory& memory = device_memory();
  const std::lock_guard<std::mutex> lock(memory.mu);
  const size_t used = memory.used_bytes[static_cast<size_t>(device)];
  if (bytes > kEmulatedDeviceBytes - used) return cudaErrorMemoryAllocation;
  const size_t rounded = rounded_bytes(bytes);
  *ptr = std::aligned_alloc(kDeviceAlignment, rounded);
  if (*ptr == nullptr) return cudaErrorMemoryAllocation;
  memory.used_bytes[static_cast<size_t>(device)] += rounded;
  memory.blocks[*ptr] = {device, rounded};
  return cudaSuccess;
}

// The bytes cudaMalloc'd on `device` and not freed.
inline size_t device_used_bytes(int device) {
  DeviceMemory& memory = device_memory();
  const std::lock_guard<std::mutex> lock(memory.mu);
  return memory.used_bytes[static_cast<size_t>(device)];
}

// What the emulated driver and GPUs report before any work: versions, compute capability, compute
// mode, and whether another process holds a device. Tests set it to make the start-up refusals
// happen (core/cuda/cuda_probe.h); the defaults are an sm_90 GPU on a driver as new as the runtime.
// Not synchronised: set it before the code under test runs, and restore it after.
struct EmulatedGpus {
  int driver_version = CUDART_VERSION;   // cudaDriverGetVersion (0: no driver loaded)
  int runtime_version = CUDART_VERSION;  // cudaRuntimeGetVersion
  int compute_major = 9, compute_minor = 0;
  cudaComputeMode compute_mode = cudaComputeModeDefault;  // every device's
  // Devices with a context of another process: exclusive-process mode refuses this one.
  std::array<bool, kNumDevices> held_elsewhere{};
};

inline EmulatedGpus& emulated_gpus() {
  static EmulatedGpus gpus;
  return gpus;
}

// As CUDA: a driver of an older major version than the runtime cannot run it at all (minor
// versions within a major are compatible).
inline bool driver_too_old() {
  const EmulatedGpus& g = emulated_gpus();
  return g.driver_version / 1000 < g.runtime_version / 1000;
}

inline cudaError_t driver_get_version(int* version) {
  if (version == nullptr) return cudaErrorInvalidValue;
  *version = emulated_gpus().driver_version;
  return cudaSuccess;
}

inline cudaError_t runtime_get_version(int* version) {
  if (version == nullptr) return cudaErrorInvalidValue;
  *version = emulated_gpus().runtime_version;
  return cudaSuccess;
}

// cudaSetDevice / cudaGetDevice / cudaGetDeviceCount: kNumDevices devices, the current one per
// host thread (stream_emu.h: a device labels its streams; memory is shared). cudaSetDevice creates
// the device's context (CUDA 12 and later): refused with cudaErrorDevicesUnavailable in compute
// mode Prohibited, or exclusive with another process holding the device.
inline cudaError_t set_device(int device) {
  if (driver_too_old()) return cudaErrorInsufficientDriver;
  if (device < 0 || device >= kNumDevices) return cudaErrorInvalidDevice;
  const EmulatedGpus& g = emulated_gpus();
  const bool exclusive = g.compute_mode == cudaComputeModeExclusive ||
                         g.compute_mode == cudaComputeModeExclusiveProcess;
  if (g.compute_mode == cudaComputeModeProhibited ||
      (exclusive && g.held_elsewhere[static_cast<size_t>(device)])) {
    return cudaErrorDevicesUnavailable;
  }
  t_current_device = device;
  return cudaSuccess;
}

inline cudaError_t get_device(int* device) {
  if (device == nullptr) return cudaErrorInvalidValue;
  *device = t_current_device;
  return cudaSuccess;
}

inline cudaError_t get_device_count(int* count) {
  if (count == nullptr) return cudaErrorInvalidValue;
  if (driver_too_old()) {
    *count = 0;
    return cudaErrorInsufficientDriver;
  }
  *count = kNumDevices;
  return cudaSuccess;
}

// cudaGetDeviceProperties: the fields the project reads (name, memory, compute capability, SMs).
inline cudaError_t get_device_properties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return cudaErrorInvalidValue;
  if (device < 0 || device >= kNumDevices) return cudaErrorInvalidDevice;
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "Emulated GPU (CPU threads)");
  prop->totalGlobalMem = kEmulatedDeviceBytes;
  prop->major = emulated_gpus().compute_major;
  prop->minor = emulated_gpus().compute_minor;
  prop->multiProcessorCount = 132;
  return cudaSuccess;
}

// cudaDeviceGetAttribute: the compute mode and capability (no context needed, as on a GPU).
inline cudaError_t device_get_attribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return cudaErrorInvalidValue;
  if (device < 0 || device >= kNumDevices) return cudaErrorInvalidDevice;
  switch (attr) {
    case cudaDevAttrComputeMode: *value = emulated_gpus().compute_mode; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor:
      *value = emulated_gpus().compute_major;
      return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor:
      *value = emulated_gpus().compute_minor;
      return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
    default: not_emulated("cudaDeviceGetAttribute of this attribute");
  }
}

// cudaMemGetInfo: each device has an H100's 80 GiB, less what this process cudaMalloc'd on it
// (memory planning tests inject their own numbers).
inline cudaError_t mem_get_info(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return cudaErrorInvalidValue;
  *free_bytes = kEmulatedDeviceBytes - device_used_bytes(t_current_device);
  *total_bytes = kEmulatedDeviceBytes;
  return cudaSuccess;
}

inline cudaError_t device_synchronize() {
  wait_until_reached(all_stream_tails());
  return t_last_error;
}

inline cudaError_t device_free(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  // Why: freeing under queued work would be a use-after-free here; a GPU's cudaFree waits too.
  device_synchronize();
  {
    DeviceMemory& memory = device_memory();
    const std::lock_guard<std::mutex> lock(memory.mu);
    if (auto it = memory.blocks.find(ptr); it != memory.blocks.end()) {
      memory.used_bytes[static_cast<size_t>(it->second.first)] -= it->second.second;
      memory.blocks.erase(it);
    }
  }
  std::free(ptr);
  return cudaSuccess;
}

// cudaHostAlloc / cudaMallocHost: any flags (portable, mapped, write-combined) give the same
// host memory, not counted as any device's; a mapped pointer's device alias
// (cudaHostGetDevicePointer) is not emulated.
inline cudaError_t host_alloc(void** ptr, size_t bytes, unsigned flags) {
  (void)flags;
  if (ptr == nullptr) return cudaErrorInvalidValue;
  *ptr = std::aligned_alloc(kDeviceAlignment, rounded_bytes(bytes));
  return *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

inline cudaError_t host_free(void* ptr) {
  // As cudaFree: queued copies may still read or write it.
  device_synchronize();
  std::free(ptr);
  return cudaSuccess;
}

inline cudaError_t memset_async(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (bytes > 0) stream_of(stream).enqueue([=] { std::memset(ptr, value, bytes); });
  return cudaSuccess;
}

// cudaMemcpy: see the file comment for how far it waits in each direction.
inline cudaError_t memcpy_sync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  Stream& legacy = Stream::legacy();
  switch (kind) {
    case cudaMemcpyHostToHost: std::memmove(dst, src, bytes); break;
    case cudaMemcpyHostToDevice: {
      // Pageable source: staged now (the caller may reuse it on return), written to the device
      // when the legacy stream gets there.
      auto staged = std::make_shared<std::vector<unsigned char>>(
          static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + bytes);
      legacy.enqueue([dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
      break;
    }
    case cudaMemcpyDeviceToHost:
      // Why the wait: a device-to-host cudaMemcpy returns only once the copy has completed.
      wait_until_reached({legacy.enqueue([=] { std::memmove(dst, src, bytes); })});
      break;
    case cudaMemcpyDeviceToDevice: legacy.enqueue([=] { std::memmove(dst, src, bytes); }); break;
    default: not_emulated("cudaMemcpy with cudaMemcpyDefault");
  }
  return cudaSuccess;
}

// cudaMemcpyAsync: queued on `stream` whatever the direction (host memory is read or written when
// the stream gets there, as pinned memory would be), except host to host.
inline cudaError_t memcpy_async(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (kind == cudaMemcpyDefault) not_emulated("cudaMemcpyAsync with cudaMemcpyDefault");
  if (kind == cudaMemcpyHostToHost) {
    std::memmove(dst, src, bytes);
  } else {
    stream_of(stream).enqueue([=] { std::memmove(dst, src, bytes); });
  }
  return cudaSuccess;
}

// The stream of an Async call: its optional last argument (CUDA's default: stream 0).
inline cudaStream_t optional_stream() { return nullptr; }
inline cudaStream_t optional_stream(cudaStream_t stream) { return stream; }

inline cudaError_t stream_create(cudaStream_t* handle, unsigned flags) {
  if (handle == nullptr) return cudaErrorInvalidValue;
  const Stream::Kind kind =
      (flags & cudaStreamNonBlocking) != 0 ? Stream::Kind::kNonBlocking : Stream::Kind::kBlocking;
  *handle = reinterpret_cast<cudaStream_t>(Stream::start(kind).get());
  return cudaSuccess;
}

inline cudaError_t stream_destroy(cudaStream_t handle) {
  if (handle == nullptr || handle == cudaStreamLegacy) return cudaErrorInvalidResourceHandle;
  stream_of(handle).retire();
  return cudaSuccess;
}

inline cudaError_t stream_synchronize(cudaStream_t handle) {
  wait_until_reached({stream_of(handle).tail()});
  return t_last_error;
}

inline cudaError_t stream_query(cudaStream_t handle) {
  const StreamPoint tail = stream_of(handle).tail();
  const std::lock_guard<std::mutex> lock(device_state().mutex);
  return Stream::reached(tail) ? cudaSuccess : cudaErrorNotReady;
}

inline cudaError_t launch_host_func(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  if (fn == nullptr) return cudaErrorInvalidValue;
  stream_of(stream).enqueue([fn, user_data] { fn(user_data); });
  return cudaSuccess;
}

inline cudaError_t event_create(cudaEvent_t* handle, unsigned flags) {
  if (handle == nullptr) return cudaErrorInvalidValue;
  auto* event = new Event;
  event->timing = (flags & cudaEventDisableTiming) == 0;
  *handle = reinterpret_cast<cudaEvent_t>(event);
  return cudaSuccess;
}

inline cudaError_t event_destroy(cudaEvent_t handle) {
  delete reinterpret_cast<Event*>(handle);
  return cudaSuccess;
}

inline cudaError_t event_record(cudaEvent_t handle, cudaStream_t stream) {
  if (handle == nullptr) return cudaErrorInvalidResourceHandle;
  // As CUDA: an event records only on a stream of the device it was created on (a thread that
  // forgot cudaSetDevice creates its events on another one).
  if (reinterpret_cast<Event*>(handle)->device != stream_of(stream).device()) {
    return cudaErrorInvalidResourceHandle;
  }
  // The record itself is an operation of the stream: reached once all before it has run. A timing
  // event notes the host's clock when the stream runs it (the emulator's "GPU time").
  auto* event = reinterpret_cast<Event*>(handle);
  std::shared_ptr<std::chrono::steady_clock::time_point> at;
  if (event->timing) at = std::make_shared<std::chrono::steady_clock::time_point>();
  StreamPoint point = stream_of(stream).enqueue([at] {
    if (at == nullptr) return;
    const std::lock_guard<std::mutex> lock(device_state().mutex);
    *at = std::chrono::steady_clock::now();
  });
  const std::lock_guard<std::mutex> lock(device_state().mutex);
  event->recorded = std::move(point);
  event->recorded_at = std::move(at);
  return cudaSuccess;
}

// cudaEventElapsedTime: milliseconds between the two events' most recent records, as the streams
// ran them. As CUDA: an event without timing or never recorded is an invalid handle; one whose
// record has not run yet is cudaErrorNotReady.
inline cudaError_t event_elapsed_time(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return cudaErrorInvalidValue;
  if (start == nullptr || end == nullptr) return cudaErrorInvalidResourceHandle;
  auto* a = reinterpret_cast<Event*>(start);
  auto* b = reinterpret_cast<Event*>(end);
  const std::lock_guard<std::mutex> lock(device_state().mutex);
  if (a->recorded_at == nullptr || b->recorded_at == nullptr) return cudaErrorInvalidResourceHandle;
  if (!Stream::reached(a->recorded) || !Stream::reached(b->recorded)) return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(*b->recorded_at - *a->recorded_at).count();
  return cudaSuccess;
}

inline StreamPoint recorded_point(cudaEvent_t handle) {
  const std::lock_guard<std::mutex> lock(device_state().mutex);
  return reinterpret_cast<Event*>(handle)->recorded;
}

inline cudaError_t event_query(cudaEvent_t handle) {
  if (handle == nullptr) return cudaErrorInvalidResourceHandle;
  const StreamPoint point = recorded_point(handle);
  const std::lock_guard<std::mutex> lock(device_state().mutex);
  return Stream::reached(point) ? cudaSuccess : cudaErrorNotReady;
}

inline cudaError_t event_synchronize(cudaEvent_t handle) {
  if (handle == nullptr) return cudaErrorInvalidResourceHandle;
  wait_until_reached({recorded_point(handle)});
  return t_last_error;
}

// The wait is for the event's record as of this call (a later record does not move it).
inline cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t handle) {
  if (handle == nullptr) return cudaErrorInvalidResourceHandle;
  stream_of(stream).enqueue([] {}, {recorded_point(handle)});
  return cudaSuccess;
}

}  // namespace zero::emu

#define cudaMalloc(ptr, bytes) \
  (::zero::emu::device_malloc(reinterpret_cast<void**>(ptr), static_cast<size_t>(bytes)))
#define cudaFree(ptr) (::zero::emu::device_free(ptr))
#define cudaHostAlloc(ptr, bytes, flags) \
  (::zero::emu::host_alloc(reinterpret_cast<void**>(ptr), static_cast<size_t>(bytes), (flags)))
#define cudaMallocHost(ptr, bytes)                                                    \
  (::zero::emu::host_alloc(reinterpret_cast<void**>(ptr), static_cast<size_t>(bytes), \
                           cudaHostAllocDefault))
#define cudaFreeHost(ptr) (::zero::emu::host_free(ptr))
#define cudaMemset(ptr, value, bytes) \
  (::zero::emu::memset_async((ptr), (value), (bytes), cudaStreamLegacy))
#define cudaMemsetAsync(ptr, value, bytes, ...) \
  (::zero::emu::memset_async((ptr), (value), (bytes), ZERO_EMU_STREAM_ARG(__VA_ARGS__)))
#define cudaMemcpy(dst, src, bytes, kind) (::zero::emu::memcpy_sync((dst), (src), (bytes), (kind)))
#define cudaMemcpyAsync(dst, src, bytes, kind, ...) \
  (::zero::emu::memcpy_async((dst), (src), (bytes), (kind), ZERO_EMU_STREAM_ARG(__VA_ARGS__)))
// The optional trailing stream argument (CUDA's default: stream 0).
#define ZERO_EMU_STREAM_ARG(...) (::zero::emu::optional_stream(__VA_ARGS__))
#define cudaDeviceSynchronize() (::zero::emu::device_synchronize())
#define cudaSetDevice(device) (::zero::emu::set_device(device))
#define cudaGetDevice(device) (::zero::emu::get_device(device))
#define cudaGetDeviceCount(count) (::zero::emu::get_device_count(count))
#define cudaGetDeviceProperties(prop, device) (::zero::emu::get_device_properties((prop), (device)))
#define cudaDeviceGetAttribute(value, attr, device) \
  (::zero::emu::device_get_attribute((value), (attr), (device)))
#define cudaDriverGetVersion(version) (::zero::emu::driver_get_version(version))
#define cudaRuntimeGetVersion(version) (::zero::emu::runtime_get_version(version))
#define cudaMemGetInfo(free_bytes, total_bytes) \
  (::zero::emu::mem_get_info((free_bytes), (total_bytes)))
#define cudaStreamSynchronize(stream) (::zero::emu::stream_synchronize(stream))
#define cudaStreamQuery(stream) (::zero::emu::stream_query(stream))
#define cudaStreamCreate(stream) (::zero::emu::stream_create((stream), cudaStreamDefault))
#define cudaStreamCreateWithFlags(stream, flags) (::zero::emu::stream_create((stream), (flags)))
#define cudaStreamDestroy(stream) (::zero::emu::stream_destroy(stream))
#define cudaLaunchHostFunc(stream, fn, user_data) \
  (::zero::emu::launch_host_func((stream), (fn), (user_data)))
#define cudaEventCreate(event) (::zero::emu::event_create((event), cudaEventDefault))
#define cudaEventCreateWithFlags(event, flags) (::zero::emu::event_create((event), (flags)))
#define cudaEventDestroy(event) (::zero::emu::event_destroy(event))
#define cudaEventRecord(event, ...) \
  (::zero::emu::event_record((event), ZERO_EMU_STREAM_ARG(__VA_ARGS__)))
#define cudaEventQuery(event) (::zero::emu::event_query(event))
#define cudaEventElapsedTime(ms, start, end) (::zero::emu::event_elapsed_time((ms), (start), (end)))
#define cudaEventSynchronize(event) (::zero::emu::event_synchronize(event))
#define cudaStreamWaitEvent(stream, event, ...) (::zero::emu::stream_wait_event((stream), (event)))
