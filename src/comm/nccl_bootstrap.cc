// exchange_nccl_id.
#include "comm/nccl_bootstrap.h"

#if defined(ZERO_WITH_NCCL)

#include <cstring>

namespace zero {

StatusOr<ncclUniqueId> exchange_nccl_id(Communicator& comm) {
  // The message rank 0 broadcasts: a result code, then the id.
  struct Message {
    int32_t nccl_result;
    ncclUniqueId id;
  };
  static_assert(sizeof(Message) % 4 == 0);
  Message message{};  // zeroed: non-root ranks' bytes are overwritten by the broadcast
  if (comm.rank() == 0) message.nccl_result = static_cast<int32_t>(ncclGetUniqueId(&message.id));
  // Bytes move verbatim: the message travels as sizeof/4 f32 elements.
  ZERO_RETURN_IF_ERROR(comm.broadcast(&message, sizeof(message) / 4, DType::kF32, /*root=*/0)
                           .with_context("broadcasting the NCCL unique id"));
  if (message.nccl_result != ncclSuccess) {
    return internal_error("rank 0: ncclGetUniqueId failed: {}",
                          ncclGetErrorString(static_cast<ncclResult_t>(message.nccl_result)));
  }
  return message.id;
}

}  // namespace zero

#endif  // ZERO_WITH_NCCL
