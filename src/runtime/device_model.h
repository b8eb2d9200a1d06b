// The model of each device (the engine's factory by device): the CPU Transformer, the CUDA model
// in CUDA builds.
#pragma once

#include <memory>

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

}  // namespace zero::runtime
