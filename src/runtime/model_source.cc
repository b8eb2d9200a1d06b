// Presets and HF directories behind one interface.
#include "runtime/model_source.h"

#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/storage.h"
#include "model/init.h"
#if defined(ZERO_WITH_CUDA)
#include "model/cuda_init.h"
#endif

namespace zero::runtime {

StatusOr<std::unique_ptr<ModelSource>> ModelSource::open(const std::string& spec, uint64_t seed) {
  std::unique_ptr<ModelSource> s(new ModelSource());
  s->seed_ = seed;
  const std::string preset = "preset:";
  if (spec.rfind(preset, 0) == 0) {
    ZERO_ASSIGN_OR_RETURN(s->config_, model::preset_model_config(spec.substr(preset.size())));
    s->layout_ = std::make_unique<model::ModelLayout>(s->config_);
    s->description_ = fmt::format("{} (random init, seed {})", spec, seed);
    return s;
  }
  std::string dir = spec;
  if (std::filesystem::path(spec).filename() == "config.json") {
    dir = std::filesystem::path(spec).parent_path().string();
  }
  ZERO_ASSIGN_OR_RETURN(s->config_, model::load_model_config(dir));
  s->layout_ = std::make_unique<model::ModelLayout>(s->config_);
  ZERO_ASSIGN_OR_RETURN(s->reader_,
                        model::HfWeightReader::open(*default_storage(), dir, *s->layout_));
  s->description_ = dir;
  return s;
}

DType ModelSource::stored_dtype() const { return reader_ ? reader_->stored_dtype() : DType::kF32; }

UnitInitFn ModelSource::init_fn(Device device) const {
  const model::ModelLayout* layout = layout_.get();
  if (reader_) {
    const model::HfWeightReader* reader = reader_.get();
    return [reader](int u, int64_t begin, int64_t end, float* dst) {
      return reader->read_unit_range(u, begin, end, dst);
    };
  }
  const uint64_t seed = seed_;
#if defined(ZERO_WITH_CUDA)
  const char* on_host = std::getenv("ZERO_INIT_ON_HOST");
  if (device == Device::kCuda && (on_host == nullptr || std::string(on_host) != "1")) {
    return [layout, seed](int u, int64_t begin, int64_t end, float* dst) {
      return model::init_unit_range_cuda(*layout, u, seed, begin, end, dst);
    };
  }
#endif
  return [layout, seed](int u, int64_t begin, int64_t end, float* dst) {
    model::init_unit_range(*layout, u, seed, begin, end, dst);
    return ok_status();
  };
}

}  // namespace zero::runtime
