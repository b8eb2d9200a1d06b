// Loads a model's units once, in their dtype (runtime/model_weights.h).
#include "runtime/model_weights.h"

#include <algorithm>
#include <vector>

#include "core/check.h"

#include "kernels/elementwise/elementwise.h"

namespace zero::runtime {

Status ModelWeights::fill_unit(const model::ModelLayout& layout, int u, DType dtype,
                               const UnitInitFn& init, void* dst) {
  return fill_range(layout, u, 0, layout.unit(u).numel, dtype, init, dst);
}

Status ModelWeights::fill_range(const model::ModelLayout& layout, int u, int64_t begin, int64_t end,
                                DType dtype, const UnitInitFn& init, void* dst) {
  ZERO_CHECK(0 <= begin && begin <= end && end <= layout.unit(u).numel, "unit ", u, " range [",
             begin, ", ", end, ") outside its ", layout.unit(u).numel, " elements");
  auto with_unit = [&](const Status& s) {
    return s.with_context(fmt::format("loading unit {}", layout.unit(u).name));
  };
  if (dtype == DType::kF32) return with_unit(init(u, begin, end, static_cast<float*>(dst)));
  const size_t elem_bytes = dtype_bytes(dtype);
  std::vector<float> scratch(static_cast<size_t>(std::min(end - begin, kChunkNumel)));
  auto* out = static_cast<char*>(dst);
  for (int64_t lo = begin; lo < end; lo += kChunkNumel) {
    const int64_t hi = std::min(end, lo + kChunkNumel);
    ZERO_RETURN_IF_ERROR(with_unit(init(u, lo, hi, scratch.data())));
    kernels::cpu::cast_from_f32(scratch.data(), out + static_cast<size_t>(lo - begin) * elem_bytes,
                                dtype, hi - lo);
  }
  return ok_status();
}

StatusOr<std::unique_ptr<ModelWeights>> ModelWeights::load(const model::ModelLayout& layout,
                                                           DType dtype, const UnitInitFn& init,
                                                           const std::function<bool(int)>& keep) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return invalid_argument("model weights: dtype {} is not fp32, bf16 or fp16", dtype_name(dtype));
  }
  std::unique_ptr<ModelWeights> w(new ModelWeights());
  w->dtype_ = dtype;
  for (int u = 0; u < layout.num_units(); ++u) {
    const int64_t numel = layout.unit(u).numel;
    w->numel_.push_back(numel);
    if (keep && !keep(u)) {
      w->units_.emplace_back();  // left to a weight stream
      continue;
    }
    const size_t bytes = static_cast<size_t>(numel) * dtype_bytes(dtype);
    AlignedBuffer values = aligned_alloc_bytes(std::max<size_t>(bytes, 1));
    ZERO_RETURN_IF_ERROR(fill_unit(layout, u, dtype, init, values.get()));
    w->units_.push_back(std::move(values));
    w->bytes_ += static_cast<int64_t>(bytes);
  }
  return w;
}

model::ParamView ModelWeights::acquire(int u) {
  model::ParamView v;
  v.data = units_[static_cast<size_t>(u)].get();
  ZERO_CHECK(v.data != nullptr, "model weights: unit ", u, " was left to a weight stream");
  v.dtype = dtype_;
  v.device = Device::kCpu;
  v.numel = numel_[static_cast<size_t>(u)];
  return v;
}

}  // namespace zero::runtime
