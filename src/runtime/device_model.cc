// make_device_model (device_model.h): the one dispatch from a device to its model.
#include "runtime/device_model.h"

#include "comm/mpi_communicator.h"
#include "comm/thread_communicator.h"
#include "model/kv_decoder.h"

namespace zero::runtime {

StatusOr<std::unique_ptr<model::Model>> make_device_model(const model::ModelConfig& config,
                                                          const model::TransformerOptions& options,
                                                          device::ExecutionContext& ctx) {
  switch (ctx.device()) {
    case Device::kCpu:
      return std::unique_ptr<model::Model>(std::make_unique<model::Transformer>(config, options));
    case Device::kCuda:
#if defined(ZERO_WITH_CUDA)
      return make_cuda_model(config, options, ctx);
#else
      break;
#endif
  }
  return unimplemented("--device {}: this build has no model for that device",
                       device_name(ctx.device()));
}

StatusOr<std::unique_ptr<model::CachedDecoder>> make_device_decoder(model::Model& model,
                                                                    int64_t capacity,
                                                                    device::ExecutionContext& ctx,
                                                                    int64_t slots,
                                                                    DType cache_dtype) {
  switch (ctx.device()) {
    case Device::kCpu:
      return std::unique_ptr<model::CachedDecoder>(
          std::make_unique<model::KvDecoder>(model.layout(), capacity, slots));
    case Device::kCuda:
#if defined(ZERO_WITH_CUDA)
      return make_cuda_decoder(model, capacity, ctx, slots, cache_dtype);
#else
      break;
#endif
  }
  return unimplemented("--device {}: this build has no key/value-cached decoder for that device",
                       device_name(ctx.device()));
}

DeviceModelBytes device_model_bytes(const model::ModelConfig& config,
                                    const model::TransformerOptions& options, DType dtype,
                                    int64_t B, int64_t T, device::ExecutionContext& ctx) {
  switch (ctx.device()) {
    case Device::kCpu: return {};
    case Device::kCuda:
#if defined(ZERO_WITH_CUDA)
      return cuda_model_bytes(config, options, dtype, B, T, ctx);
#else
      break;
#endif
  }
  return {};
}

StatusOr<DeviceMemoryInfo> probe_device_memory(device::ExecutionContext& ctx) {
  switch (ctx.device()) {
    case Device::kCpu: break;
    case Device::kCuda:
#if defined(ZERO_WITH_CUDA)
      return probe_cuda_memory(ctx);
#else
      break;
#endif
  }
  return unimplemented("--device {}: no device memory to probe", device_name(ctx.device()));
}

StatusOr<DistBackend> parse_dist_backend(std::string_view value) {
  if (value == "auto") return DistBackend::kAuto;
  if (value == "nccl") return DistBackend::kNccl;
  if (value == "mpi") return DistBackend::kMpi;
  return invalid_argument("--dist_backend {}: expected auto, nccl or mpi", value);
}

std::string_view dist_backend_name(DistBackend b) {
  switch (b) {
    case DistBackend::kAuto: return "auto";
    case DistBackend::kNccl: return "nccl";
    case DistBackend::kMpi: return "mpi";
  }
  return "?";
}

bool ranks_share_a_gpu(int local_world_size, int device_count) {
  return device_count > 0 && local_world_size > device_count;
}

int rank_cuda_device(const Communicator& comm, int device_count) {
  if (ranks_share_a_gpu(comm.local_world_size(), device_count)) {
    return comm.local_rank() % device_count;
  }
  return comm.local_rank();
}

namespace {

// A second communicator over `bootstrap`'s ranks for the staged transport (collective).
StatusOr<std::unique_ptr<Communicator>> duplicate_host_communicator(Communicator& bootstrap) {
  if (auto* threads = dynamic_cast<ThreadCommunicator*>(&bootstrap)) {
    ZERO_ASSIGN_OR_RETURN(std::unique_ptr<ThreadCommunicator> dup, threads->duplicate());
    return std::unique_ptr<Communicator>(std::move(dup));
  }
  if (auto* mpi = dynamic_cast<MpiCommunicator*>(&bootstrap)) {
    ZERO_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> dup, mpi->duplicate());
    return std::unique_ptr<Communicator>(std::move(dup));
  }
  return unimplemented("--dist_backend mpi needs an MPI or thread communicator, not {}",
                       bootstrap.backend_name());
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> make_device_communicator(Communicator& bootstrap,
                                                                 device::ExecutionContext& ctx,
                                                                 DistBackend dist,
                                                                 int device_count) {
  if (ctx.device() == Device::kCuda &&
      (dist == DistBackend::kMpi ||
       (dist == DistBackend::kAuto &&
        ranks_share_a_gpu(bootstrap.local_world_size(), device_count)))) {
    return duplicate_host_communicator(bootstrap);
  }
  switch (ctx.device()) {
    case Device::kCpu:
      // The CPU backend's device memory is host memory, but its comm stream's worker issues the
      // device path's collectives while the rank's thread issues the engine's own (the loss):
      // they need a communicator of their own.
      if (auto* threads = dynamic_cast<ThreadCommunicator*>(&bootstrap)) {
        ZERO_ASSIGN_OR_RETURN(std::unique_ptr<ThreadCommunicator> dup, threads->duplicate());
        return std::unique_ptr<Communicator>(std::move(dup));
      }
      return unimplemented("the CPU backend's collectives need a thread communicator, not {}",
                           bootstrap.backend_name());
    case Device::kCuda:
#if defined(ZERO_WITH_CUDA)
      return make_nccl_communicator(bootstrap);
#else
      break;
#endif
  }
  return unimplemented("--device {}: this build has no communicator on that device's memory",
                       device_name(ctx.device()));
}

}  // namespace zero::runtime
