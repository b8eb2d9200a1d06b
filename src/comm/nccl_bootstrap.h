// NCCL bootstrap over MPI (or any Communicator: ranks on threads under the CPU emulator): rank 0
// creates the 128-byte ncclUniqueId and broadcasts it (the pattern of the NCCL docs and
// nccl-tests). Needs no GPU: ncclGetUniqueId only opens the bootstrap socket.
#pragma once

#if defined(ZERO_WITH_NCCL)

#include <nccl.h>

#include "comm/communicator.h"
#include "core/status.h"

namespace zero {

// Collective over `comm`: every rank returns the id rank 0 generated, or every rank returns an
// error (rank 0's failure is broadcast too, so nobody waits for an id that never comes).
StatusOr<ncclUniqueId> exchange_nccl_id(Communicator& comm);

}  // namespace zero

#endif  // ZERO_WITH_NCCL
