// Loads a model's units once, in their dtype (runtime/model_weights.h).
#include "runtime/model_weights.h"

#include <algorithm>

#include "kernels/elementwise/elementwise.h"

namespace zero::runtime {

StatusOr<std::unique_ptr<ModelWeights>> ModelWeights::load(const model::ModelLayout& layout,
                                                           DType dtype, const UnitInitFn& init) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return invalid_argument("model weights: dtype {} is not fp32, bf16 or fp16", dtype_name(dtype));
  }
  std::unique_ptr<ModelWeights> w(new ModelWeights());
  w->dtype_ = dtype;
  const size_t elem_bytes = dtype_bytes(dtype);
  std::vector<float> scratch;
  for (int u = 0; u < layout.num_units(); ++u) {
    const int64_t numel = layout.unit(u).numel;
    const size_t bytes = static_cast<size_t>(numel) * elem_bytes;
    AlignedBuffer values = aligned_alloc_bytes(std::max<size_t>(bytes, 1));
    auto with_unit = [&](const Status& s) {
      return s.with_context(fmt::format("loading unit {}", layout.unit(u).name));
    };
    if (dtype == DType::kF32) {
      ZERO_RETURN_IF_ERROR(with_unit(init(u, 0, numel, reinterpret_cast<float*>(values.get()))));
    } else {
      scratch.resize(static_cast<size_t>(std::min(numel, kChunkNumel)));
      auto* dst = reinterpret_cast<char*>(values.get());
      for (int64_t lo = 0; lo < numel; lo += kChunkNumel) {
        const int64_t hi = std::min(numel, lo + kChunkNumel);
        ZERO_RETURN_IF_ERROR(with_unit(init(u, lo, hi, scratch.data())));
        kernels::cpu::cast_from_f32(scratch.data(), dst + static_cast<size_t>(lo) * elem_bytes,
                                    dtype, hi - lo);
      }
    }
    w->units_.push_back(std::move(values));
    w->numel_.push_back(numel);
    w->bytes_ += static_cast<int64_t>(bytes);
  }
  return w;
}

model::ParamView ModelWeights::acquire(int u) {
  model::ParamView v;
  v.data = units_[static_cast<size_t>(u)].get();
  v.dtype = dtype_;
  v.device = Device::kCpu;
  v.numel = numel_[static_cast<size_t>(u)];
  return v;
}

}  // namespace zero::runtime
