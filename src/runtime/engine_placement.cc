// Engine::placement(): where the engine put each part of the training state, from its own
// decisions (the one "zero train: placement: ..." line).
#include <fmt/format.h>

#include "runtime/engine.h"

namespace zero::runtime {

std::string Engine::Placement::line() const {
  std::string out =
      fmt::format("parameters {}; gradients {}; master weights and moments {}; activations {}",
                  parameters, gradients, optimizer_state, activations);
  if (!collectives.empty()) out += fmt::format("; collectives {}", collectives);
  return out;
}

Engine::Placement Engine::placement() const {
  const std::string device = model_->device() == Device::kCpu ? "host memory" : "GPU memory";
  const OffloadOptions& off = options_.offload;
  Placement p;
  p.activations = device;
  if (staged_params_ != nullptr) {
    p.parameters = "host memory, each unit copied to the GPU where the model uses it";
    p.gradients = "host memory, each unit's copied back from the GPU";
  } else {
    p.parameters = state_device_ != nullptr ? device : "host memory";
    p.gradients = p.parameters;
  }
  if (device_comm_ != nullptr && model_->device() != Device::kCpu) {
    p.collectives = device_comm_->backend_name() == "nccl"
                        ? std::string("NCCL")
                        : fmt::format("{} communicator, staged through pinned host memory",
                                      device_comm_->backend_name());
  }
  if (const sharding::ParamStore* store = params_->store(); store != nullptr) {
    const char* where = store->num_on_nvme() > 0 ? "NVMe" : "host memory";
    if (params_->params_offloaded()) {
      // ZeRO-Infinity on the device path: nothing of the model stays on the GPU between uses.
      p.parameters = fmt::format(
          "{} (stage-3 shards, offload_param: each unit's copied to the GPU and gathered there "
          "for its use)",
          store->num_on_nvme() > 0 ? "NVMe and page-locked host memory"
                                   : "page-locked host memory");
      p.gradients = device;
    } else {
      p.parameters += fmt::format(" (stage-3 shards offloaded to {}: offload_param)", where);
    }
  }
  if (gradients_on_host()) {
    // ZeRO-Offload's layout: nothing of the gradient stays on the device between buckets.
    p.gradients = fmt::format(
        "page-locked host memory (this rank's partitions; each micro-step's reduced shard copied "
        "off the {} as soon as it is reduced)",
        model_->device() == Device::kCpu ? "device" : "GPU");
  }
  if (state_->on_device()) {
    p.optimizer_state = fmt::format("{} (the fused AdamW there)", device);
  } else if (state_->on_nvme()) {
    p.optimizer_state = "NVMe swap files under offload_optimizer.nvme_path (the CPU Adam)";
  } else if (off.optimizer != OptimizerOffload::kNone) {
    p.optimizer_state = fmt::format("host memory (offload_optimizer cpu{}: the CPU Adam{})",
                                    off.ratio < 1.0 ? fmt::format(", ratio {}", off.ratio) : "",
                                    overlap_adam_ ? ", overlapping backward" : "");
  } else {
    p.optimizer_state = options_.optimizer.kind == optim::OptimizerKind::kAdam
                            ? "host memory (the CPU Adam)"
                            : "host memory";
  }
  if (state_->dtypes().moments == DType::kBF16) {
    p.optimizer_state += ", in bf16 (bf16_optimizer_states)";
  } else if (state_->dtypes().master == DType::kBF16) {
    p.optimizer_state += ", bf16 master weights and fp32 moments";
  }
  return p;
}

}  // namespace zero::runtime
