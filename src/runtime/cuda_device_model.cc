// make_cuda_model (device_model.h): the CUDA model on the execution context's GPU and compute
// stream. CUDA builds only.
#include <cuda_runtime.h>

#include "comm/mpi_communicator.h"
#include "device/cuda_stream.h"
#include "kernels/matmul/matmul_cuda.h"
#include "model/cuda_kv_decoder.h"
#include "model/cuda_transformer.h"
#include "runtime/device_model.h"
#if defined(ZERO_WITH_NCCL)
#include "comm/nccl_communicator.h"
#endif

namespace zero::runtime {

namespace {

model::CudaTransformerOptions cuda_options(const model::TransformerOptions& options) {
  model::CudaTransformerOptions o;
  o.activation_checkpointing = options.activation_checkpointing;
  o.checkpoints_in_host_memory = options.checkpoints_in_host_memory;
  return o;
}

device::CudaStream& cuda_compute(device::ExecutionContext& ctx) {
  ZERO_CHECK(ctx.compute().device() == Device::kCuda, "a ", device_name(ctx.compute().device()),
             " stream where a CUDA one was expected");
  return static_cast<device::CudaStream&>(ctx.compute());
}

}  // namespace

StatusOr<std::unique_ptr<model::Model>> make_cuda_model(const model::ModelConfig& config,
                                                        const model::TransformerOptions& options,
                                                        device::ExecutionContext& ctx) {
  device::CudaStream& stream = cuda_compute(ctx);
  // The model's kernels run on the current device of the thread that calls it: this rank's GPU.
  stream.activate();
  ZERO_ASSIGN_OR_RETURN(
      std::unique_ptr<model::CudaTransformer> m,
      model::CudaTransformer::create(config, cuda_options(options), stream.get()));
  return std::unique_ptr<model::Model>(std::move(m));
}

StatusOr<std::unique_ptr<model::CachedDecoder>> make_cuda_decoder(model::Model& model,
                                                                  int64_t capacity,
                                                                  device::ExecutionContext& ctx,
                                                                  int64_t slots,
                                                                  DType cache_dtype) {
  auto* cuda_model = dynamic_cast<model::CudaTransformer*>(&model);
  if (cuda_model == nullptr) {
    return invalid_argument("--device cuda: a key/value-cached decoder needs the CUDA model");
  }
  cuda_compute(ctx).activate();
  ZERO_ASSIGN_OR_RETURN(std::unique_ptr<model::CudaKvDecoder> decoder,
                        model::CudaKvDecoder::create(*cuda_model, capacity, slots, cache_dtype));
  return std::unique_ptr<model::CachedDecoder>(std::move(decoder));
}

DeviceModelBytes cuda_model_bytes(const model::ModelConfig& config,
                                  const model::TransformerOptions& options, DType dtype, int64_t B,
                                  int64_t T, device::ExecutionContext& ctx) {
  // The scratch sizes depend on the device (its multiprocessor count): this rank's GPU.
  cuda_compute(ctx).activate();
  const model::CudaTransformerOptions o = cuda_options(options);
  DeviceModelBytes bytes;
  if (B > 0 && T > 0) {
    bytes.activations = model::CudaTransformer::activation_bytes(config, o, B, T, dtype);
    bytes.host_checkpoints = model::CudaTransformer::host_checkpoint_bytes(config, o, B, T);
  }
  bytes.buffers = model::CudaTransformer::widen_bytes(config, dtype) +
                  static_cast<int64_t>(kernels::cuda::MatmulContext::kWorkspaceBytes);
  if (B > 0 && T > 0)
    bytes.buffers += model::CudaTransformer::attention16_bytes(config, dtype, B, T);
  return bytes;
}

StatusOr<DeviceMemoryInfo> probe_cuda_memory(device::ExecutionContext& ctx) {
  device::CudaStream& stream = cuda_compute(ctx);
  stream.activate();
  size_t free_bytes = 0, total_bytes = 0;
  if (const cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes); err != cudaSuccess) {
    return internal_error("cudaMemGetInfo on GPU {}: {}", stream.device_index(),
                          cudaGetErrorString(err));
  }
  return DeviceMemoryInfo{stream.device_index(), static_cast<int64_t>(free_bytes),
                          static_cast<int64_t>(total_bytes)};
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
#else
StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator&) {
  return unimplemented("--device cuda: this build has no NCCL (collectives on GPU memory)");
}
#endif

}  // namespace zero::runtime
