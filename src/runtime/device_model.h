// The model of each device (the engine's factory by device): the CPU Transformer, the CUDA model
// in CUDA builds.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "core/status.h"
#include "device/backend.h"
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

// The communicator for ZeRO's collectives on ctx's device memory, over `bootstrap`'s ranks
// (collective: every rank calls it). Null: `bootstrap` itself works on that memory (the CPU
// backend's device memory is host memory). UNIMPLEMENTED when this build has none for the device
// (a CUDA build without NCCL): the engine then keeps the ZeRO state in host memory.
StatusOr<std::unique_ptr<Communicator>> make_device_communicator(Communicator& bootstrap,
                                                                 device::ExecutionContext& ctx);

// CUDA builds with NCCL (runtime/cuda_device_model.cc): NcclCommunicator over `bootstrap`.
StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator& bootstrap);

}  // namespace zero::runtime
