// TensorBoard event files (tensorboard_monitor.h).
#include "runtime/tensorboard_monitor.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "runtime/tf_event.h"

namespace zero::runtime {

namespace {
double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

StatusOr<std::unique_ptr<TensorBoardMonitor>> TensorBoardMonitor::open(
    const std::string& output_path, const std::string& job_name) {
  const std::string dir =
      (std::filesystem::path(output_path.empty() ? "." : output_path) / job_name).string();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return io_error("{}: cannot create the tensorboard directory: {}", dir, ec.message());
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "localhost");
  const double now = wall_time_now();
  const std::string path = fmt::format("{}/events.out.tfevents.{:010d}.{}.{}.0", dir,
                                       static_cast<int64_t>(now), host, ::getpid());
  // "x": never append to (or replace) another writer's file.
  std::FILE* f = std::fopen(path.c_str(), "wbx");
  if (!f) return io_error("{}: cannot create the event file: {}", path, std::strerror(errno));
  std::unique_ptr<TensorBoardMonitor> monitor(new TensorBoardMonitor(f, path));
  ZERO_RETURN_IF_ERROR(monitor->append(file_version_event(now)));
  return monitor;
}

TensorBoardMonitor::~TensorBoardMonitor() { std::fclose(file_); }

Status TensorBoardMonitor::write(const std::string& tag, int64_t step, double value) {
  return append(scalar_event(wall_time_now(), step, tag, static_cast<float>(value)));
}

Status TensorBoardMonitor::append(const std::string& event) {
  const std::string record = tfrecord(event);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    return io_error("{}: write failed: {}", path_, std::strerror(errno));
  }
  return ok_status();
}

}  // namespace zero::runtime
