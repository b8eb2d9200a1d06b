// make_device_model (engine.h): the model of a device this binary was built with.
#include "runtime/engine.h"

namespace zero::runtime {

StatusOr<std::unique_ptr<model::Model>> make_device_model(const model::ModelConfig& config,
                                                          const model::TransformerOptions& options,
                                                          device::ExecutionContext& ctx) {
  (void)config;
  (void)options;
  if (ctx.device() == Device::kCpu) {
    return std::unique_ptr<model::Model>(std::make_unique<model::Transformer>(config, options));
  }
  return unimplemented("--device {}: this build has no model for that device",
                       device_name(ctx.device()));
}

}  // namespace zero::runtime
