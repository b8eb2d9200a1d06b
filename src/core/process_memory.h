// This process's host memory as the kernel counts it (Linux /proc), for progress lines and
// metrics.jsonl.
#pragma once

#include <cstdint>
#include <optional>

namespace zero {

struct HostMemory {
  int64_t rss_bytes = 0;       // resident set now (VmRSS)
  int64_t rss_peak_bytes = 0;  // the largest resident set so far (VmHWM)
};

// Reads /proc/self/status; std::nullopt where it cannot be read (not Linux, no /proc).
std::optional<HostMemory> host_memory();

}  // namespace zero
