// MpiRuntime implementation.
#include "comm/mpi_runtime.h"

#include <mpi.h>

namespace zero {

StatusOr<std::unique_ptr<MpiRuntime>> MpiRuntime::create(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  bool owns = false;
  if (initialized) {
    MPI_Query_thread(&provided);
  } else {
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
