// Out of device memory, named: what a failed device allocation reports (which buffer, the bytes
// asked, the memory plan's figure for it, what the device had), and ZERO_DEVICE_MEMORY_LIMIT, an
// allocation budget that makes the same failure happen on purpose (tests, the emulator, a GPU
// shared with a job that may grow). No CUDA here: core/cuda/device_alloc.h applies it to
// cudaMalloc.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace zero {

// The environment variable: a byte count, optionally with a unit (KiB, MiB, GiB; K, M, G mean the
// same), e.g. "512MiB". Named allocations are refused once the device's memory in use
// (cudaMemGetInfo: total - free, every process and the CUDA context) plus the request would pass
// it.
inline constexpr const char* kDeviceMemoryLimitEnv = "ZERO_DEVICE_MEMORY_LIMIT";

// Parses a limit as the variable holds it; INVALID_ARGUMENT naming the variable and the text.
StatusOr<int64_t> parse_device_memory_limit(std::string_view text);

// The limit in force: std::nullopt when the variable is unset or empty. A malformed value is a
// one-line error on stderr and exit status 2 (a budget typed wrong must not be silently ignored).
std::optional<int64_t> device_memory_limit_from_env();

// What was asked and what the device had.
struct DeviceAllocFailure {
  std::string_view what;       // the buffer, e.g. "the CUDA model's activation slab (2 x 8 tokens)"
  int64_t bytes = 0;           // asked for
  int64_t planned_bytes = -1;  // the memory plan's figure for this buffer (-1: not planned)
  int device = 0;
  int64_t free_bytes = -1;  // cudaMemGetInfo (-1: unknown)
  int64_t total_bytes = -1;
  std::optional<int64_t> limit_bytes;  // ZERO_DEVICE_MEMORY_LIMIT, when it refused the request
  std::string cuda_error;   // cudaMalloc's error text, when it was cudaMalloc that refused
  std::string_view advice;  // what to change, e.g. "a smaller --per_device_train_batch_size"
};

// One line (no newline): "zero: error: out of GPU memory on device D: <what> asks for N bytes
// (X MiB); the memory plan counted P bytes for it; the device has F MiB free of T MiB (...)".
std::string device_alloc_failure_message(const DeviceAllocFailure& f);

// The same without "zero: error: ", for a Status (the backend's allocate()).
std::string device_alloc_failure_reason(const DeviceAllocFailure& f);

// For a buffer a training step needs where no Status can be returned (a stage-3 gather deep in a
// forward): prints "zero: error: <what>: <why's message>" as one line on stderr and ends the
// process with status 1 at once. Under mpirun / zero launch a rank that exits non-zero ends the
// job, so no peer is left waiting in a collective (ZERO_CHECK would abort naming file:line, with a
// core dump).
[[noreturn]] void exit_out_of_device_memory(std::string_view what, const Status& why);

}  // namespace zero
