// Fault injection (run with 3 ranks): rank 1 stops itself (SIGSTOP) before a collective, like a
// hung peer. Ranks 0 and 2 must get kDeadlineExceeded naming rank 1 within the 2 s timeout. Rank 0
// then kills rank 1 so mpirun ends, and prints "COMM-TIMEOUT-TEST PASS" when both survivors saw the
// right diagnosis. mpirun exits non-zero (a rank died by a signal), so ctest matches the output
// instead.
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"

namespace zero {
namespace {

constexpr int kStoppedRank = 1;
constexpr int kVerdictTag = 99;

int run(MpiRuntime& runtime) {
  MpiCommunicatorOptions options;
  options.timeout_ms = 2000;
  options.abandon_drain_ms = 200;  // the stopped peer never arrives: do not linger at exit
  auto made = MpiCommunicator::create_world(runtime, options);
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().to_string().c_str());
    return 2;
  }
  auto comm = std::move(made).value();
  if (comm->world_size() != 3) {
    std::fprintf(stderr, "run with -np 3\n");
    return 2;
  }
  // Every rank's pid, so rank 0 can end the stopped rank (all ranks run on this host).
  int64_t my_pid = getpid();
  std::vector<int64_t> pids(comm->world_size());
  // Bytes move verbatim in all_gather: an int64 travels as two f32 elements.
  if (!comm->all_gather(&my_pid, pids.data(), 2, DType::kF32).ok()) return 2;
  // Why barrier: every rank must be past setup before rank 1 stops.
  if (!comm->barrier().ok()) return 2;

  std::vector<float> grads(1000, 1.0f);
  if (comm->rank() == kStoppedRank) {
    raise(SIGSTOP);  // hung peer; rank 0 kills us while stopped
    return 3;
  }
  const auto start = std::chrono::steady_clock::now();
  Status s = comm->all_reduce(grads.data(), grads.size(), DType::kF32);
  const double waited_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const bool ok = s.code() == StatusCode::kDeadlineExceeded &&
                  s.message().find("did not reach it: 1") != std::string::npos &&
                  s.message().find("rank " + std::to_string(comm->rank()) +
                                   ": collective "
                                   "all_reduce #2") != std::string::npos &&
                  waited_s < 10.0;
  std::printf("rank %d after %.1f s: %s\n", comm->rank(), waited_s, s.to_string().c_str());
  std::fflush(stdout);

  // The survivors compare notes point-to-point on MPI_COMM_WORLD (the stopped rank is not needed).
  int verdict = ok ? 1 : 0;
  if (comm->rank() == 2) {
    MPI_Send(&verdict, 1, MPI_INT, 0, kVerdictTag, MPI_COMM_WORLD);
  } else {
    int theirs = 0;
    MPI_Recv(&theirs, 1, MPI_INT, 2, kVerdictTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    std::printf("COMM-TIMEOUT-TEST %s\n", ok && theirs == 1 ? "PASS" : "FAIL");
    std::fflush(stdout);
    kill(static_cast<pid_t>(pids[kStoppedRank]), SIGKILL);
  }
  return 1;  // the caller's policy after a collective timeout: exit non-zero
}

}  // namespace
}  // namespace zero

int main(int argc, char** argv) {
  auto runtime = zero::MpiRuntime::create(&argc, &argv);
  if (!runtime.ok()) {
    std::fprintf(stderr, "%s\n", runtime.status().to_string().c_str());
    return 2;
  }
  return zero::run(**runtime);
}
