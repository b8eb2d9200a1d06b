// Host memory of this process from /proc/self/status (process_memory.h).
#include "core/process_memory.h"

#include <cstdio>
#include <cstring>

namespace zero {

std::optional<HostMemory> host_memory() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return std::nullopt;
  HostMemory m;
  bool have_rss = false, have_peak = false;
  char line[256];
  while (std::fgets(line, sizeof(line), f)) {
    long long kib = 0;
    // "VmRSS:	  123456 kB"
    if (std::sscanf(line, "VmRSS: %lld kB", &kib) == 1) {
      m.rss_bytes = kib * 1024;
      have_rss = true;
    } else if (std::sscanf(line, "VmHWM: %lld kB", &kib) == 1) {
      m.rss_peak_bytes = kib * 1024;
      have_peak = true;
    }
  }
  std::fclose(f);
  if (!have_rss || !have_peak) return std::nullopt;
  return m;
}

}  // namespace zero
