// InterruptGuard and the step-boundary agreement (interrupt.h).
#include "runtime/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <vector>

namespace zero::runtime {

namespace {

std::atomic<int> g_pending{0};  // async-signal-safe: lock-free int
struct sigaction g_old_int, g_old_term, g_old_pipe;

void on_signal(int signal) {
  int expected = 0;
  if (g_pending.compare_exchange_strong(expected, signal)) {
    // Say at once that it was seen (the step boundary may be a while away); write(2) is
    // async-signal-safe, printf is not.
    static constexpr char kMsg[] =
        "zero train: stopping at the next step boundary (send the signal again to stop now)\n";
    (void)!::write(STDERR_FILENO, kMsg, sizeof(kMsg) - 1);
  } else {
    // Second signal: the operator insists. Default action (terminate by that signal).
    ::signal(signal, SIG_DFL);
    ::raise(signal);
  }
}

}  // namespace

InterruptGuard::InterruptGuard() {
  g_pending.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking I/O and MPI progress continue across the signal
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
  // A closed stdout (`zero train | head`) must not kill the run: writes fail with EPIPE instead.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &g_old_pipe);
}

InterruptGuard::~InterruptGuard() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGPIPE, &g_old_pipe, nullptr);
}

int InterruptGuard::pending() { return g_pending.load(); }

void InterruptGuard::raise_for_testing(int signal) { g_pending.store(signal); }

StatusOr<int> agree_on_interrupt(Communicator& comm) {
  // One float per rank (signal numbers are small integers, exact in fp32).
  const float mine = static_cast<float>(InterruptGuard::pending());
  std::vector<float> all(static_cast<size_t>(comm.world_size()));
  ZERO_RETURN_IF_ERROR(comm.all_gather(&mine, all.data(), 1, DType::kF32));
  int agreed = 0;
  for (float f : all) {
    const int s = static_cast<int>(f);
    if (s == SIGTERM || (s == SIGINT && agreed != SIGTERM)) agreed = s;
  }
  return agreed;
}

const char* interrupt_name(int signal) {
  return signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : "signal";
}

}  // namespace zero::runtime
