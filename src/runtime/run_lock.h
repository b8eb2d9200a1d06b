// RunLock: one job per output directory. An exclusive flock on OUT/.lock, held for the life of a
// `zero train` run (and of a `zero ckpt` write), so a second job started on the same directory
// stops at once with the holder's pid and host instead of interleaving checkpoints with it.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"

namespace zero::runtime {

class RunLock {
 public:
  // Creates `dir` if missing, opens dir/.lock (never following a symlink) and takes an exclusive,
  // non-blocking flock on it; then records "pid <pid> host <host> <purpose>" in it.
  // FAILED_PRECONDITION naming the directory and the holder's pid and host when another process
  // (or another RunLock of this process) holds it. The lock goes with the process: a crashed or
  // killed holder never leaves a stale lock behind.
  static StatusOr<std::unique_ptr<RunLock>> acquire(const std::string& dir,
                                                    const std::string& purpose);

  // Releases the lock (the file stays; its content is only informative).
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  RunLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

}  // namespace zero::runtime
