// SIGINT / SIGTERM during `zero train`: the handler only sets a flag; the step loop checks it at
// step boundaries, where every rank agrees through one small host collective, so all ranks stop
// after the same step, (optionally) save a checkpoint, release their swap files and exit with
// 128 + the signal (130 / 143), as a shell reports a process killed by it.
#pragma once

#include "comm/communicator.h"
#include "core/status.h"

namespace zero::runtime {

// Installs the handlers for its lifetime and restores the previous ones after; SIGPIPE is ignored
// meanwhile (a closed stdout makes writes fail; the run goes on). A second signal
// while the first is being handled takes the default action (an operator's "stop now").
// One at a time per process.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  // The first SIGINT / SIGTERM this process received since construction, or 0.
  static int pending();
  // Test seam: as if `signal` had been received.
  static void raise_for_testing(int signal);
};

// Collective (every rank of `comm`, at the same step boundary): the signal any rank received,
// SIGTERM preferred over SIGINT, or 0. Every rank gets the same answer.
StatusOr<int> agree_on_interrupt(Communicator& comm);

// "SIGINT" / "SIGTERM".
const char* interrupt_name(int signal);

}  // namespace zero::runtime
