// World construction for subcommands that run on every rank.
#include "cli/world.h"

#include <cstdlib>

#include "comm/mpi_communicator.h"
#include "comm/self_communicator.h"

namespace zero::cli {

bool launched_as_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

StatusOr<World> make_world() {
  World w;
  if (!launched_as_rank()) {
    w.comm = std::make_unique<SelfCommunicator>();
    return w;
  }
  int argc = 0;
  char** argv = nullptr;
  ZERO_ASSIGN_OR_RETURN(w.runtime, MpiRuntime::create(&argc, &argv));
  ZERO_ASSIGN_OR_RETURN(auto comm, MpiCommunicator::create_world(*w.runtime));
  w.comm = std::move(comm);
  return w;
}

}  // namespace zero::cli
