// The CUDA backend's StreamCollectives (stream_collectives.h): NCCL on its communicator's stream,
// ordered by CUDA events. Builds with NCCL only; on the CPU emulator with its NCCL stand-in.
#include <cuda_runtime.h>

#include "device/cuda_stream.h"
#include "device/stream_collectives.h"

#if defined(ZERO_WITH_NCCL)
#include "comm/nccl_communicator.h"

namespace zero::device {
namespace {

class NcclStreamCollectives final : public StreamCollectives {
 public:
  explicit NcclStreamCollectives(NcclCommunicator& nccl) : StreamCollectives(nccl), nccl_(nccl) {}

  OrderedCollective issue(const Event& ready, std::span<const CollectiveCall> calls) override {
    // REQUIRES (stream_collectives.h): a CudaEvent of the communicator's device.
    const auto& r = static_cast<const CudaEvent&>(ready);
    ZERO_CHECK(r.device_index() == nccl_.device(), "an event of GPU ", r.device_index(),
               " for the collectives of GPU ", nccl_.device());
    // A fresh event per collective: its consumers may wait for it long after the next one.
    auto done = std::make_shared<CudaEvent>(nccl_.device());
    CommHandle handle = nccl_.issue_after(r.get(), calls, done->get());
    return OrderedCollective{std::move(handle), std::move(done)};
  }

 private:
  NcclCommunicator& nccl_;
};

}  // namespace

StatusOr<std::unique_ptr<StreamCollectives>> make_nccl_stream_collectives(Communicator& comm,
                                                                          ExecutionContext& ctx) {
  auto* nccl = dynamic_cast<NcclCommunicator*>(&comm);
  if (nccl == nullptr) {
    return failed_precondition(
        "collectives on CUDA streams need an NCCL communicator, not a {} one", comm.backend_name());
  }
  const auto& compute = static_cast<const CudaStream&>(ctx.compute());
  if (compute.device_index() != nccl->device()) {
    return failed_precondition("rank {}: the NCCL communicator is on GPU {}, the streams on GPU {}",
                               comm.rank(), nccl->device(), compute.device_index());
  }
  return std::unique_ptr<StreamCollectives>(std::make_unique<NcclStreamCollectives>(*nccl));
}

}  // namespace zero::device

#endif  // ZERO_WITH_NCCL
