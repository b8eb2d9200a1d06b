// DeepSpeed-compatible CSV monitor files.
#include "runtime/csv_monitor.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

namespace zero::runtime {

CsvMonitor::CsvMonitor(std::string output_path, std::string job_name) {
  dir_ = (std::filesystem::path(output_path.empty() ? "." : output_path) / job_name).string();
}

CsvMonitor::~CsvMonitor() {
  for (auto& [name, f] : files_) std::fclose(f);
}

Status CsvMonitor::write(const std::string& event, int64_t step, double value) {
  auto it = files_.find(event);
  if (it == files_.end()) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) return io_error("{}: cannot create csv_monitor directory: {}", dir_, ec.message());
    std::string file = event;
    for (auto& ch : file) {
      if (ch == '/') ch = '_';
    }
    const std::string path = dir_ + "/" + file + ".csv";
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) return io_error("{}: cannot open: {}", path, std::strerror(errno));
    std::fprintf(f, "step,%s\n", event.c_str());
    it = files_.emplace(event, f).first;
  }
  std::string row = fmt::format("{},{}\n", step, value);
  if (std::fputs(row.c_str(), it->second) < 0 || std::fflush(it->second) != 0) {
    return io_error("{}/{}: write failed: {}", dir_, event, std::strerror(errno));
  }
  return ok_status();
}

}  // namespace zero::runtime
