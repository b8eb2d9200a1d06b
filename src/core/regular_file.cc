// read_regular_file (regular_file.h): stat, open non-blocking, fstat, bounded read.
#include "core/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace zero {
namespace {

Status not_regular(const std::string& path, mode_t mode, std::string_view what) {
  return invalid_argument("{}: is {}, not a regular file (expected {})", path, file_type_name(mode),
                          what);
}

Status too_large(const std::string& path, uint64_t max_bytes, std::string_view what) {
  return invalid_argument("{}: larger than the {} limit for {}", path, format_byte_limit(max_bytes),
                          what);
}

// Closes the descriptor on every path out of read_regular_file.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

const char* file_type_name(uint32_t st_mode) {
  const mode_t mode = static_cast<mode_t>(st_mode);
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

std::string format_byte_limit(uint64_t bytes) {
  if (bytes >= (uint64_t{1} << 20) && bytes % (uint64_t{1} << 20) == 0) {
    return fmt::format("{} MiB", bytes >> 20);
  }
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} bytes", bytes);
}

StatusOr<std::string> read_regular_file(const std::string& path, uint64_t max_bytes,
                                        std::string_view what) {
  // stat first, so a device or FIFO is refused without even being opened (opening some devices
  // has side effects); fstat after opening closes the race with a path swapped in between.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT) return not_found("{}: no such file", path);
    return io_error("{}: {}", path, std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) return not_regular(path, st.st_mode, what);
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return too_large(path, max_bytes, what);

  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (fd.get() < 0) {
    int err = errno;
    if (err == ENOENT) return not_found("{}: no such file", path);
    return io_error("{}: cannot open: {}", path, std::strerror(err));
  }
  if (::fstat(fd.get(), &st) != 0) return io_error("{}: fstat: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return not_regular(path, st.st_mode, what);
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return too_large(path, max_bytes, what);

  // Read to end of file, never past max_bytes + 1: a file that grows while it is read is still
  // bounded.
  std::string bytes;
  bytes.resize(static_cast<size_t>(st.st_size) + 1);
  size_t used = 0;
  while (true) {
    if (used == bytes.size()) {
      if (used > max_bytes) return too_large(path, max_bytes, what);
      bytes.resize(std::min<uint64_t>(max_bytes + 1, bytes.size() * 2 + 4096));
    }
    ssize_t n = ::read(fd.get(), bytes.data() + used, bytes.size() - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("{}: read failed: {}", path, std::strerror(errno));
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  if (used > max_bytes) return too_large(path, max_bytes, what);
  bytes.resize(used);
  return bytes;
}

}  // namespace zero
