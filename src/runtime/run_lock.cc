// RunLock (run_lock.h): flock on OUT/.lock.
#include "runtime/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/storage.h"

namespace zero::runtime {

StatusOr<std::unique_ptr<RunLock>> RunLock::acquire(const std::string& dir,
                                                    const std::string& purpose) {
  ZERO_RETURN_IF_ERROR(default_storage()->make_dirs(dir));
  const std::string path = dir + "/.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("{}: cannot open the run lock: {}", path, std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err != EWOULDBLOCK) {
      ::close(fd);
      return io_error("{}: flock failed: {}", path, std::strerror(err));
    }
    // The holder writes its identity right after locking: a just-started holder may not have.
    char buf[512] = {};
    const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    ::close(fd);
    std::string holder = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    if (holder.empty()) holder = "a process that is starting (pid and host not yet recorded)";
    return failed_precondition(
        "{} is in use by another job: {} holds {} (one job per output directory; wait for it, "
        "stop it, or choose another output directory)",
        dir, holder, path);
  }
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  const std::string who = fmt::format("pid {} host {} ({})\n", ::getpid(), host, purpose);
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size())) {
    const int err = errno;
    ::close(fd);
    return io_error("{}: cannot record the lock holder: {}", path, std::strerror(err));
  }
  return std::unique_ptr<RunLock>(new RunLock(fd, path));
}

RunLock::~RunLock() {
  // Closing the descriptor releases the flock.
  ::close(fd_);
}

}  // namespace zero::runtime
