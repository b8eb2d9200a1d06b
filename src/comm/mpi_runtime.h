// MpiRuntime: MPI_Init_thread / MPI_Finalize for one process, RAII. Works under mpirun and without
// it (an Open MPI singleton: world size 1), so `zero train` runs alone or launched.
#pragma once

#include <atomic>
#include <memory>

#include "core/status.h"

namespace zero {

class MpiRuntime {
 public:
  // Initialises MPI asking for MPI_THREAD_MULTIPLE (each MpiCommunicator calls MPI from its own
  // communication thread, and several communicators may be alive). Fails unless at least
  // MPI_THREAD_SERIALIZED is provided; with SERIALIZED only one MpiCommunicator may exist at a
  // time. If MPI is already initialised (by someone else) the runtime does not finalize it.
  // REQUIRES: at most one MpiRuntime per process (MPI cannot be re-initialised after finalize).
  // argc/argv may be null.
  static StatusOr<std::unique_ptr<MpiRuntime>> create(int* argc, char*** argv);

  // Finalizes MPI, unless a communicator was abandoned with a collective still pending (after a
  // timeout): then MPI_Finalize could block on the dead peer, so it is skipped and the process must
  // exit with an error (mpirun then tears the job down).
  // REQUIRES: every MpiCommunicator created from this runtime was destroyed.
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  // The thread level MPI provided (MPI_THREAD_*).
  int thread_level() const { return thread_level_; }
  bool thread_multiple() const;

  // Called by communicators that leaked a pending collective (see ~MpiRuntime). Thread-safe.
  void mark_unclean() { unclean_.store(true); }
  bool unclean() const { return unclean_.load(); }

  // Live-communicator bookkeeping (MpiCommunicator only): under MPI_THREAD_SERIALIZED at most one
  // communication thread may exist. Returns false when registering would break that. Thread-safe.
  bool register_communicator();
  void unregister_communicator() { live_communicators_.fetch_sub(1); }

 private:
  MpiRuntime(int thread_level, bool owns) : thread_level_(thread_level), owns_(owns) {}

  int thread_level_;
  bool owns_;
  std::atomic<bool> unclean_{false};
  std::atomic<int> live_communicators_{0};
};

}  // namespace zero
