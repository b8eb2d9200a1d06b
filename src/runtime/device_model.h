// The model of each device (the engine's factory by device): the CPU Transformer, the CUDA model
// in CUDA builds.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "comm/communicator.h"
#include "core/status.h"
#include "device/backend.h"
#include "model/cached_decoder.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/transformer.h"

namespace zero::runtime {

// The model of ctx's device, its kernels queued on ctx.compute(); an error naming the device when
// this build has none.
StatusOr<std::unique_ptr<model::Model>> make_device_model(const model::ModelConfig& config,
                                                          const model::TransformerOptions& options,
                                                          device::ExecutionContext& ctx);

// CUDA builds (runtime/cuda_device_model.cc): model::CudaTransformer on ctx's GPU and compute
// stream.
StatusOr<std::unique_ptr<model::Model>> make_cuda_model(const model::ModelConfig& config,
                                                        const model::TransformerOptions& options,
                                                        device::ExecutionContext& ctx);

// A key/value-cached decoder of `capacity` positions per slot over `model`, a model of ctx's device
// from make_device_model (which must outlive it), on the model's stream, with `slots` sequences at
// once. `cache_dtype`: the GPU's cache in fp32 or bf16 (model::CudaKvDecoder); the CPU's is fp32
// whatever it says. Errors: a device (or build) without one, a capacity the model cannot hold, out
// of device memory.
StatusOr<std::unique_ptr<model::CachedDecoder>> make_device_decoder(
    model::Model& model, int64_t capacity, device::ExecutionContext& ctx, int64_t slots = 1,
    DType cache_dtype = DType::kF32);
// CUDA builds (runtime/cuda_device_model.cc): model::CudaKvDecoder over a model::CudaTransformer.
StatusOr<std::unique_ptr<model::CachedDecoder>> make_cuda_decoder(model::Model& model,
                                                                  int64_t capacity,
                                                                  device::ExecutionContext& ctx,
                                                                  int64_t slots, DType cache_dtype);

// What the model of a device will hold, for memory planning before it allocates anything.
struct DeviceModelBytes {
  int64_t activations = 0;  // device: the activation / scratch slab of one (B, T) micro-batch
                            // (a 16-bit model's GEMM operand copies included)
  int64_t buffers =
      0;  // device: 16-bit units' fp32 widen buffers and attention copies, matmul workspace
  int64_t host_checkpoints = 0;  // pinned host memory: cpu_checkpointing's block inputs
};

// The bytes of the model of ctx's device for (B, T) micro-batches of a `dtype` model (B or T 0:
// no activations counted); all zero for the CPU model, whose memory plan_memory counts. On a GPU:
// model::CudaTransformer's static sizing functions, on ctx's device (their scratch sizes depend on
// it).
DeviceModelBytes device_model_bytes(const model::ModelConfig& config,
                                    const model::TransformerOptions& options, DType dtype,
                                    int64_t B, int64_t T, device::ExecutionContext& ctx);
DeviceModelBytes cuda_model_bytes(const model::ModelConfig& config,
                                  const model::TransformerOptions& options, DType dtype, int64_t B,
                                  int64_t T, device::ExecutionContext& ctx);

// Memory of one device, as its driver reports it now.
struct DeviceMemoryInfo {
  int device_index = 0;
  int64_t free_bytes = 0;   // what allocations can still get (other processes' use excluded)
  int64_t total_bytes = 0;  // the device's capacity
};

// The memory of ctx's device (cudaMemGetInfo on this rank's GPU). Errors: a device without its own
// memory (the CPU), a build without that device, or the driver's error.
StatusOr<DeviceMemoryInfo> probe_device_memory(device::ExecutionContext& ctx);
StatusOr<DeviceMemoryInfo> probe_cuda_memory(device::ExecutionContext& ctx);

// The transport of the device path's collectives (`--dist_backend`, DeepSpeed's
// init_distributed(dist_backend=...)): NCCL, or the host communicator staged through pinned host
// memory (`mpi`); `auto` takes NCCL unless this node's ranks share a GPU (NCCL refuses two ranks
// on one device).
enum class DistBackend { kAuto, kNccl, kMpi };
// "auto" | "nccl" | "mpi"; otherwise an error naming the value.
StatusOr<DistBackend> parse_dist_backend(std::string_view value);
std::string_view dist_backend_name(DistBackend b);

// Whether `local_world_size` ranks on this node have a GPU each (`device_count` visible ones).
bool ranks_share_a_gpu(int local_world_size, int device_count);
// The GPU of `comm`'s rank: one per rank, its index on its node (CUDA_VISIBLE_DEVICES narrows
// what is seen); when the node's ranks share the GPUs, local rank mod `device_count`, as NCCL's
// bootstrap picks (NcclCommunicator::create), with the collectives then staged through host
// memory (make_device_communicator).
int rank_cuda_device(const Communicator& comm, int device_count);

// The communicator for ZeRO's collectives on ctx's device memory, over `bootstrap`'s ranks
// (collective: every rank calls it, with the same `dist`): on a GPU NCCL, or for `mpi` (and for
// `auto` when ranks share a GPU) a duplicate of the host communicator (MpiCommunicator or
// ThreadCommunicator), whose collectives device::make_stream_collectives stages through pinned
// host memory; on the CPU backend a duplicate of a ThreadCommunicator (its collectives run on the
// comm stream's worker, device/stream_collectives.h). UNIMPLEMENTED when this build has none for
// the device (a CUDA build without NCCL, the CPU backend over MPI): the engine then keeps the ZeRO
// state in host memory.
StatusOr<std::unique_ptr<Communicator>> make_device_communicator(
    Communicator& bootstrap, device::ExecutionContext& ctx, DistBackend dist = DistBackend::kAuto,
    int device_count = 1);

// CUDA builds (runtime/cuda_device_model.cc): NcclCommunicator over `bootstrap`; UNIMPLEMENTED
// without NCCL. (The CPU emulator's build always has it, on its NCCL stand-in.)
StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator& bootstrap);

}  // namespace zero::runtime
