// The data-parallel world of a `zero` subcommand: MPI when a launcher started this process as one
// rank of several (mpirun, srun, zero launch), a world of one otherwise (no MPI start-up at all).
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/mpi_runtime.h"
#include "core/status.h"

namespace zero::cli {

struct World {
  std::unique_ptr<MpiRuntime> runtime;  // null for a world of one
  std::unique_ptr<Communicator> comm;

  World() = default;
  World(World&&) = default;
  World& operator=(World&&) = default;
  // The communicator must go before the MPI runtime finalises.
  ~World() { comm.reset(); }
};

// True when a launcher started this process as a rank (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK).
bool launched_as_rank();
StatusOr<World> make_world();

}  // namespace zero::cli
