// ModelSource: what `--model` names — a preset ("preset:gpt2-tiny", random init from a seed) or an
// HF checkpoint directory (config.json + safetensors) — turned into a ModelConfig and a UnitInitFn
// that fills any range of any unit (so ZeRO ranks read only their partitions).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "model/hf_checkpoint.h"
#include "model/model_config.h"
#include "model/param_layout.h"
#include "runtime/unit_init.h"

namespace zero::runtime {

class ModelSource {
 public:
  // `spec`: "preset:NAME" or a directory (or a config.json inside one).
  static StatusOr<std::unique_ptr<ModelSource>> open(const std::string& spec, uint64_t seed);

  const model::ModelConfig& config() const { return config_; }
  bool is_preset() const { return reader_ == nullptr; }
  const std::string& description() const { return description_; }
  // Fills elements [begin, end) of unit u (zeros past the unit's numel). Thread-compatible.
  // `device` kCuda: a preset's random values are computed on the calling thread's current GPU
  // (model/cuda_init.h; bitwise the host's), unless ZERO_INIT_ON_HOST=1 or the build has no CUDA.
  UnitInitFn init_fn(Device device = Device::kCpu) const;
  // The dtype the weights are stored in (HfWeightReader::stored_dtype; fp32 for a preset).
  DType stored_dtype() const;

 private:
  ModelSource() = default;
  model::ModelConfig config_;
  std::unique_ptr<model::ModelLayout> layout_;
  std::unique_ptr<model::HfWeightReader> reader_;
  uint64_t seed_ = 0;
  std::string description_;
};

}  // namespace zero::runtime
