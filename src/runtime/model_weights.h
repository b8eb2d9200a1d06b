// ModelWeights: a model's parameters for inference — every unit once, in one dtype, in host memory.
// What `zero generate` and `zero eval` hold instead of a training Engine: 4 bytes per parameter in
// fp32 (2 in bf16 / fp16) against the Engine's ~20 (working copy, gradients, fp32 master weights,
// Adam moments). It is the model's ParamAccess (acquire hands out the unit as it is stored).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "model/param_access.h"
#include "model/param_layout.h"
#include "runtime/unit_init.h"

namespace zero::runtime {

class ModelWeights final : public model::ParamAccess {
 public:
  // Every unit of `layout` filled by `init` and stored in `dtype` (fp32, bf16 or fp16; a 16-bit
  // dtype rounds to nearest even, exact for values that came from a checkpoint of that dtype).
  // 16-bit units are filled through an fp32 scratch of at most kChunkNumel elements, so loading
  // holds the weights plus a few MB. Fails with init's error (naming the unit).
  // `keep` (may be null: every unit): the units to hold; the others are left to a weight stream
  // (runtime/streamed_params.h: ZeRO-Inference's blocks in pinned memory or on NVMe, filled with
  // fill_unit) and acquiring one of them is a broken invariant (ZERO_CHECK).
  static StatusOr<std::unique_ptr<ModelWeights>> load(
      const model::ModelLayout& layout, DType dtype, const UnitInitFn& init,
      const std::function<bool(int u)>& keep = nullptr);
  // Unit u's values in `dtype` into dst (ModelLayout::unit(u).numel elements), as load stores
  // them (through an fp32 scratch of at most kChunkNumel elements for a 16-bit dtype). Fails with
  // init's error naming the unit.
  static Status fill_unit(const model::ModelLayout& layout, int u, DType dtype,
                          const UnitInitFn& init, void* dst);
  // Elements [begin, end) of unit u (unit-flat; REQUIRES 0 <= begin <= end <= numel) in `dtype`
  // into dst (end - begin elements), as fill_unit stores them: a rank's shard of a unit
  // (runtime/streamed_params.h's partitioned blocks).
  static Status fill_range(const model::ModelLayout& layout, int u, int64_t begin, int64_t end,
                           DType dtype, const UnitInitFn& init, void* dst);

  // Unit u's values (numel = ModelLayout::unit(u).numel) in dtype(); valid while this lives.
  model::ParamView acquire(int u) override;
  void release(int u) override {}

  DType dtype() const { return dtype_; }
  // Bytes of weights held (the kept units').
  int64_t bytes() const { return bytes_; }

  static constexpr int64_t kChunkNumel = int64_t{1} << 20;

 private:
  ModelWeights() = default;
  DType dtype_ = DType::kF32;
  std::vector<AlignedBuffer> units_;
  std::vector<int64_t> numel_;
  int64_t bytes_ = 0;
};

}  // namespace zero::runtime
