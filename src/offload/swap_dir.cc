// Locked swap directories and the reclaiming of dead runs' (swap_dir.h).
#include "offload/swap_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace zero::offload {

namespace {

constexpr const char* kLockFile = ".lock";
constexpr const char* kVisiblePrefix = "zero_swap_";
constexpr const char* kStagingPrefix = ".zero_swap_new_";
// A staging directory lives for microseconds (mkdtemp, lock, rename); one older than this was left
// by a process killed in between, and its lock is certainly not about to be taken.
constexpr int64_t kStagingGraceSeconds = 600;

std::string errno_text(int err) { return std::strerror(err); }

std::string read_holder(int fd) {
  char buf[256] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  std::string s = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "a swapper that had not recorded itself" : s;
}

// Removes the entries of `dir` (regular files and symlinks, never followed) except the lock file,
// adding them to `out`. False when something could not be removed.
bool remove_entries(const std::string& dir, ReclaimedSwapDir& out) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return false;
  bool all = true;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == ".." || name == kLockFile) continue;
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || S_ISDIR(st.st_mode) || ::unlink(path.c_str()) != 0) {
      spdlog::warn("NvmeSwapper: could not remove {} of a dead run: {}", path, errno_text(errno));
      all = false;
      continue;
    }
    out.files += 1;
    out.bytes += S_ISREG(st.st_mode) ? static_cast<int64_t>(st.st_size) : 0;
  }
  ::closedir(d);
  return all;
}

// Reclaims `dir` if its lock is free; std::nullopt when it is live or not ours to touch.
std::optional<ReclaimedSwapDir> reclaim_one(const std::string& dir) {
  const std::string lock_path = dir + "/" + kLockFile;
  const int fd = ::open(lock_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;  // no lock file: not a directory this protocol made
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);  // held: a live swapper's (EWOULDBLOCK), or flock is refused: leave it
    return std::nullopt;
  }
  ReclaimedSwapDir r;
  r.path = dir;
  r.holder = read_holder(fd);
  // Still holding the lock: a second reclaimer waits out (EWOULDBLOCK) and finds nothing after.
  r.complete = remove_entries(dir, r);
  if (r.complete && (::unlink(lock_path.c_str()) != 0 || ::rmdir(dir.c_str()) != 0) &&
      errno != ENOENT) {
    spdlog::warn("NvmeSwapper: could not remove {} of a dead run: {}", dir, errno_text(errno));
    r.complete = false;
  }
  ::close(fd);
  return r;
}

}  // namespace

StatusOr<std::unique_ptr<SwapDir>> SwapDir::create(const std::string& nvme_dir, int rank) {
  std::string staging = fmt::format("{}/{}pid{}_XXXXXX", nvme_dir, kStagingPrefix, ::getpid());
  if (::mkdtemp(staging.data()) == nullptr) {
    return io_error("nvme_path {}: cannot create a private directory: {}", nvme_dir,
                    errno_text(errno));
  }
  const std::string staging_lock = staging + "/" + kLockFile;
  const int fd =
      ::open(staging_lock.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    ::unlink(staging_lock.c_str());
    ::rmdir(staging.c_str());
    return io_error("nvme_path {}: cannot lock its private directory: {}", nvme_dir,
                    errno_text(err));
  }
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  const std::string who = fmt::format("pid {} host {} rank {}\n", ::getpid(), host, rank);
  if (::pwrite(fd, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size())) {
    spdlog::warn("NvmeSwapper: cannot record the holder in {}: {}", staging_lock,
                 errno_text(errno));
  }
  // The visible name keeps mkdtemp's unique suffix.
  const std::string suffix = staging.substr(staging.size() - 6);
  const std::string path =
      fmt::format("{}/{}pid{}_rank{}_{}", nvme_dir, kVisiblePrefix, ::getpid(), rank, suffix);
  if (::rename(staging.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(staging_lock.c_str());
    ::rmdir(staging.c_str());
    ::close(fd);
    return io_error("nvme_path {}: cannot publish its private directory {}: {}", nvme_dir, path,
                    errno_text(err));
  }
  return std::unique_ptr<SwapDir>(new SwapDir(path, fd));
}

SwapDir::~SwapDir() {
  // Unlinked while still locked: no reclaimer can take the lock of a directory being removed.
  ::unlink((path_ + "/" + kLockFile).c_str());
  if (::rmdir(path_.c_str()) != 0 && errno != ENOENT) {
    spdlog::warn("NvmeSwapper: could not remove its directory {}: {}", path_, errno_text(errno));
  }
  ::close(lock_fd_);
}

std::vector<ReclaimedSwapDir> reclaim_dead_swap_dirs(const std::string& nvme_dir) {
  std::vector<ReclaimedSwapDir> out;
  DIR* d = ::opendir(nvme_dir.c_str());
  if (d == nullptr) return out;
  std::vector<std::string> candidates;
  const int64_t now = static_cast<int64_t>(::time(nullptr));
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const bool visible = name.rfind(kVisiblePrefix, 0) == 0;
    const bool staging = name.rfind(kStagingPrefix, 0) == 0;
    if (!visible && !staging) continue;
    const std::string path = nvme_dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    // A young staging directory may be a swapper between creating its lock and taking it.
    if (staging && now - static_cast<int64_t>(st.st_mtime) <= kStagingGraceSeconds) continue;
    candidates.push_back(path);
  }
  ::closedir(d);
  for (const std::string& dir : candidates) {
    if (std::optional<ReclaimedSwapDir> r = reclaim_one(dir)) out.push_back(std::move(*r));
  }
  return out;
}

}  // namespace zero::offload
