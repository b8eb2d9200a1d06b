// SwapDir: a swapper's own directory under nvme_path, holding an flock for the swapper's life, so a
// later run can tell the directories of runs that were killed (SIGKILL, OOM killer, a lost node:
// no destructor ran) from live ones, and reclaim only the former (issue 32 item 1).
//
// Protocol: the directory is made under a hidden staging name (".zero_swap_new_*"), its ".lock"
// created and flocked, and only then renamed to "zero_swap_pid<pid>_rank<r>_<suffix>". So every
// directory under a visible name has a lock file that was locked before the name appeared, and
// "nobody holds its lock" means "its swapper is gone" (the kernel drops an flock with its process).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace zero::offload {

class SwapDir {
 public:
  // Makes a fresh directory (0700) under the existing directory `nvme_dir`, locked by this object.
  static StatusOr<std::unique_ptr<SwapDir>> create(const std::string& nvme_dir, int rank);
  // Unlinks the lock file, removes the directory (the owner removed its files first: a directory
  // that is not empty is left, with a warning) and releases the lock.
  ~SwapDir();
  SwapDir(const SwapDir&) = delete;
  SwapDir& operator=(const SwapDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  SwapDir(std::string path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  std::string path_;
  int lock_fd_;
};

// One directory reclaim_dead_swap_dirs removed.
struct ReclaimedSwapDir {
  std::string path;
  std::string holder;  // what its lock file says: "pid <pid> host <host> rank <r>"
  int64_t files = 0;
  int64_t bytes = 0;     // the files' sizes (swap files are preallocated: their capacity)
  bool complete = true;  // false: something in it could not be removed (warned about)
};

// Removes every swap directory directly under `nvme_dir` whose lock nobody holds, with its files,
// and returns what it removed. Never touches a directory whose lock is held (a live swapper's, in
// this process or another), one under the staging name younger than ten minutes (a swapper may be
// between creating its lock and taking it), one without a lock file (an older zero's), a symlink,
// or anything else; what it cannot open or remove is left with a warning.
// Safe to run from several processes at once (the lock serialises them).
std::vector<ReclaimedSwapDir> reclaim_dead_swap_dirs(const std::string& nvme_dir);

}  // namespace zero::offload
