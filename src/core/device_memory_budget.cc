// Naming device out-of-memory failures, and the ZERO_DEVICE_MEMORY_LIMIT budget
// (device_memory_budget.h).
#include "core/device_memory_budget.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

namespace zero {

namespace {
constexpr double kMiB = 1024.0 * 1024.0;

std::string mib(int64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / kMiB);
}
}  // namespace

StatusOr<int64_t> parse_device_memory_limit(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string_view unit = text.substr(digits);
  int shift = -1;
  if (unit.empty()) shift = 0;
  if (unit == "K" || unit == "KiB") shift = 10;
  if (unit == "M" || unit == "MiB") shift = 20;
  if (unit == "G" || unit == "GiB") shift = 30;
  if (digits == 0 || digits > 15 || shift < 0) {
    return invalid_argument(
        "{}={}: expected a byte count, optionally with KiB, MiB or GiB (e.g. 512MiB)",
        kDeviceMemoryLimitEnv, text);
  }
  return std::stoll(std::string(text.substr(0, digits))) << shift;
}

std::optional<int64_t> device_memory_limit_from_env() {
  const char* value = std::getenv(kDeviceMemoryLimitEnv);
  if (value == nullptr || *value == '\0') return std::nullopt;
  StatusOr<int64_t> limit = parse_device_memory_limit(value);
  if (!limit.ok()) {
    std::fprintf(stderr, "zero: error: %s\n", limit.status().message().c_str());
    std::fflush(stderr);
    std::_Exit(2);
  }
  return *limit;
}

std::string device_alloc_failure_message(const DeviceAllocFailure& f) {
  return "zero: error: " + device_alloc_failure_reason(f);
}

void exit_out_of_device_memory(std::string_view what, const Status& why) {
  const std::string line = fmt::format("zero: error: {}: {}\n", what, why.message());
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  std::_Exit(1);
}

std::string device_alloc_failure_reason(const DeviceAllocFailure& f) {
  std::string line = fmt::format("out of GPU memory on device {}: {} asks for {} bytes ({})",
                                 f.device, f.what, f.bytes, mib(f.bytes));
  if (f.planned_bytes >= 0) {
    line += fmt::format("; the memory plan counted {} bytes ({}) for it", f.planned_bytes,
                        mib(f.planned_bytes));
  }
  if (f.free_bytes >= 0 && f.total_bytes >= 0) {
    line += fmt::format("; the device has {} free of {}", mib(f.free_bytes), mib(f.total_bytes));
  }
  if (f.limit_bytes) {
    line += fmt::format("; {} allows {} bytes ({}) in use", kDeviceMemoryLimitEnv, *f.limit_bytes,
                        mib(*f.limit_bytes));
  }
  if (!f.cuda_error.empty()) line += fmt::format(" (cudaMalloc: {})", f.cuda_error);
  if (!f.advice.empty()) line += fmt::format(". Try {}", f.advice);
  return line;
}

}  // namespace zero
