// make_cuda_model (device_model.h): the CUDA model on the execution context's GPU and compute
// stream. CUDA builds only.
#include "comm/mpi_communicator.h"
#include "device/cuda_stream.h"
#include "model/cuda_transformer.h"
#include "runtime/device_model.h"
#if defined(ZERO_WITH_NCCL)
#include "comm/nccl_communicator.h"
#endif

namespace zero::runtime {

StatusOr<std::unique_ptr<model::Model>> make_cuda_model(const model::ModelConfig& config,
                                                        const model::TransformerOptions& options,
                                                        device::ExecutionContext& ctx) {
  ZERO_CHECK(ctx.compute().device() == Device::kCuda, "make_cuda_model: a ",
             device_name(ctx.compute().device()), " stream");
  auto& stream = static_cast<device::CudaStream&>(ctx.compute());
  // The model's kernels run on the current device of the thread that calls it: this rank's GPU.
  stream.activate();
  model::CudaTransformerOptions o;
  o.activation_checkpointing = options.activation_checkpointing;
  o.checkpoints_in_host_memory = options.checkpoints_in_host_memory;
  ZERO_ASSIGN_OR_RETURN(std::unique_ptr<model::CudaTransformer> m,
                        model::CudaTransformer::create(config, o, stream.get()));
  return std::unique_ptr<model::Model>(std::move(m));
}

#if defined(ZERO_WITH_NCCL)
StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator& bootstrap) {
  // The bootstrap's own timeout when it has one (MPI: ZERO_COMM_TIMEOUT_MS), else the default.
  int64_t timeout_ms = kDefaultCommTimeoutMs;
  if (auto* mpi = dynamic_cast<MpiCommunicator*>(&bootstrap); mpi && mpi->timeout_ms() > 0) {
    timeout_ms = mpi->timeout_ms();
  }
  ZERO_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> nccl,
                        NcclCommunicator::create(bootstrap, timeout_ms));
  return std::unique_ptr<Communicator>(std::move(nccl));
}
#endif

}  // namespace zero::runtime
