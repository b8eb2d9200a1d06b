// MpiRuntime implementation.
#include "comm/mpi_runtime.h"

#include <malloc.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>

namespace zero {
namespace {

// True when this process is one of several ranks started by mpirun / srun (before MPI_Init, from
// the launcher's environment).
bool launched_with_peers() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && std::atoi(v) > 1) return true;
  }
  return false;
}

// Why: Open MPI's non-blocking collectives (libnbc) malloc a temporary as large as the message for
// every reduction and free it afterwards. glibc serves such sizes with mmap and returns them with
// munmap, so each step page-faults and zeroes the whole gradient bucket again (measured at world 2:
// ~37k page faults per step, ~10% of a rank's CPU; bench/results/cpu_world2.md). One arena without
// mmap and a high trim threshold keep freed memory for the next step. Set before MPI_Init so every
// thread (MPI's, the communication thread, OpenMP's) shares that arena. ZERO_MALLOC_KEEP=0 keeps
// glibc's defaults (memory is then returned to the OS sooner, at that cost per step).
void keep_freed_memory_for_reuse() {
  const char* opt_out = std::getenv("ZERO_MALLOC_KEEP");
  if (opt_out != nullptr && std::strcmp(opt_out, "0") == 0) return;
  if (!launched_with_peers()) return;
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace

StatusOr<std::unique_ptr<MpiRuntime>> MpiRuntime::create(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  bool owns = false;
  if (initialized) {
    MPI_Query_thread(&provided);
  } else {
    keep_freed_memory_for_reuse();
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      return internal_error("MPI_Init_thread failed");
    }
    owns = true;
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    if (owns) MPI_Finalize();
    return failed_precondition(
        "MPI provides thread level {} but the communication thread needs at least "
        "MPI_THREAD_SERIALIZED ({}); use an MPI built with thread support",
        provided, MPI_THREAD_SERIALIZED);
  }
  // Errors come back as codes (mapped to Status) instead of aborting the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return std::unique_ptr<MpiRuntime>(new MpiRuntime(provided, owns));
}

MpiRuntime::~MpiRuntime() {
  if (!owns_) return;
  if (unclean_.load()) return;  // see the header: finalize could hang on a dead peer
  MPI_Finalize();
}

bool MpiRuntime::register_communicator() {
  int live = live_communicators_.fetch_add(1);
  if (live > 0 && !thread_multiple()) {
    live_communicators_.fetch_sub(1);
    return false;
  }
  return true;
}

bool MpiRuntime::thread_multiple() const { return thread_level_ >= MPI_THREAD_MULTIPLE; }

}  // namespace zero
