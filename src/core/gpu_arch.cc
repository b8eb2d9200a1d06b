// check_gpu_arch (gpu_arch.h): CMAKE_CUDA_ARCHITECTURES against a compute capability.
#include "core/gpu_arch.h"

#include <cctype>
#include <optional>
#include <vector>

#include <fmt/format.h>

namespace zero {
namespace {

// One entry of CMAKE_CUDA_ARCHITECTURES: "90" (SASS + PTX), "90-real", "90-virtual", "90a".
struct ArchEntry {
  int major = 0, minor = 0;
  char suffix = 0;  // 'a' (arch-specific), 'f' (family-specific) or 0
  bool sass = true, ptx = true;
};

std::optional<ArchEntry> parse_entry(std::string_view s) {
  ArchEntry e;
  size_t i = 0;
  int number = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    number = number * 10 + (s[i] - '0');
    ++i;
  }
  if (i == 0 || number < 10) return std::nullopt;
  e.major = number / 10;
  e.minor = number % 10;
  if (i < s.size() && (s[i] == 'a' || s[i] == 'f')) e.suffix = s[i++];
  const std::string_view rest = s.substr(i);
  if (rest == "-real") {
    e.ptx = false;
  } else if (rest == "-virtual") {
    e.sass = false;
  } else if (!rest.empty()) {
    return std::nullopt;
  }
  return e;
}

std::string sm_name(int major, int minor) { return fmt::format("sm_{}{}", major, minor); }

std::string entry_name(const ArchEntry& e) {
  std::string name = fmt::format(
      "{}{}", e.sass ? sm_name(e.major, e.minor) : fmt::format("compute_{}{}", e.major, e.minor),
      e.suffix ? std::string(1, e.suffix) : std::string());
  if (!e.sass) name += " (PTX only)";
  return name;
}

// SASS for e runs on major.minor: same major, minor at least e's ("a": exactly e's).
bool sass_runs(const ArchEntry& e, int major, int minor) {
  if (!e.sass || e.major != major) return false;
  return e.suffix == 'a' ? e.minor == minor : minor >= e.minor;
}

// PTX for e is JIT-compiled for major.minor: any newer GPU ("a": the same one; "f": its family).
bool ptx_runs(const ArchEntry& e, int major, int minor) {
  if (!e.ptx) return false;
  if (e.suffix == 'a') return e.major == major && e.minor == minor;
  if (e.suffix == 'f') return e.major == major && minor >= e.minor;
  return major > e.major || (major == e.major && minor >= e.minor);
}

}  // namespace

GpuArchFit check_gpu_arch(std::string_view built, int major, int minor) {
  GpuArchFit fit;
  std::vector<ArchEntry> entries;
  std::vector<std::string_view> unparsed;
  size_t begin = 0;
  while (begin <= built.size()) {
    size_t end = built.find_first_of(";, ", begin);
    if (end == std::string_view::npos) end = built.size();
    const std::string_view item = built.substr(begin, end - begin);
    if (!item.empty()) {
      if (auto e = parse_entry(item)) {
        entries.push_back(*e);
      } else {
        unparsed.push_back(item);
      }
    }
    begin = end + 1;
  }
  if (entries.empty() || !unparsed.empty()) {
    // "all", "all-major", "native", "" (or a value this check does not know): nothing to compare.
    fit.runs = true;
    fit.message = fmt::format("binary built for CMAKE_CUDA_ARCHITECTURES={} (not checked)",
                              built.empty() ? "(unset)" : std::string(built));
    return fit;
  }
  std::string names;
  for (const ArchEntry& e : entries) names += (names.empty() ? "" : ", ") + entry_name(e);
  const std::string gpu = sm_name(major, minor);
  for (const ArchEntry& e : entries) {
    if (sass_runs(e, major, minor)) {
      fit.runs = true;
      fit.message = fmt::format("binary built for {}", names);
      return fit;
    }
  }
  for (const ArchEntry& e : entries) {
    if (ptx_runs(e, major, minor)) {
      fit.runs = true;
      fit.by_jit = true;
      fit.message = fmt::format(
          "binary built for {}: no machine code for {}, the driver JIT-compiles the PTX (slow "
          "first launches; rebuild with -DCMAKE_CUDA_ARCHITECTURES={}{} for native code)",
          names, gpu, major, minor);
      return fit;
    }
  }
  fit.message =
      fmt::format("built for {}, this GPU is {}: rebuild with -DCMAKE_CUDA_ARCHITECTURES={}{}",
                  names, gpu, major, minor);
  return fit;
}

}  // namespace zero
