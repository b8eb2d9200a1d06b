// The seam between the model and ZeRO: the model asks ParamAccess for a unit's parameters and hands
// gradients to a GradSink; it knows nothing of sharding, gathering, offload or reduction.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace zero::kernels::cpu {
class Bf16Gemm;
}

namespace zero::model {

// A unit's working parameters where the ParamAccess keeps them: `numel` values (the padded unit:
// at least ModelLayout::unit(u).numel, laid out as that unit) of `dtype` in `device` memory. A
// 16-bit model's units are in its dtype (half the bytes of fp32); fp32 ones are fp32.
struct ParamView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  int64_t numel = 0;
};

class ParamAccess {
 public:
  virtual ~ParamAccess() = default;
  // Unit `u`'s values (a 16-bit model's are in its dtype, fp32 ones in fp32). Valid until the
  // matching release(u). acquire/release pairs nest: the tied head acquires the embedding unit
  // while the final unit is held.
  virtual ParamView acquire(int u) = 0;
  virtual void release(int u) = 0;
};

// A model-owned fp32 buffer that a 16-bit unit is widened into (grown to the largest unit it has
// held, then reused). One buffer serves one acquired unit at a time: units held at once (the final
// unit and the tied embedding) need one each.
class WidenBuffer {
 public:
  // fp32 values of `view`: its own memory when it is fp32, else this buffer, widened (exactly).
  // REQUIRES: view.device == Device::kCpu.
  const float* widen(const ParamView& view);
  // Bytes held (0 until a 16-bit unit was widened).
  int64_t bytes() const { return static_cast<int64_t>(values_.capacity() * sizeof(float)); }
  // bf16 units widened here are lent to `gemm` (source `slot`) while acquired, so its GEMMs read
  // the unit's bf16 values instead of rounding the widened ones back (the same bits). Null: none.
  void lend_to(kernels::cpu::Bf16Gemm* gemm, int slot) {
    gemm_ = gemm;
    slot_ = slot;
  }
  // The unit widened last is released: its values are no longer lent.
  void forget();

 private:
  std::vector<float> values_;
  kernels::cpu::Bf16Gemm* gemm_ = nullptr;
  int slot_ = 0;
};

// RAII acquire of one unit as fp32 values: acquires on construction, widens a 16-bit unit into
// `buffer`, releases on release() or destruction (whichever comes first). Converts to the values'
// pointer, so `w + offset` reads like the plain pointer it replaces.
class AcquiredUnit {
 public:
  AcquiredUnit(ParamAccess& params, int u, WidenBuffer& buffer)
      : params_(params), buffer_(buffer), unit_(u), values_(buffer.widen(params.acquire(u))) {}
  ~AcquiredUnit() { release(); }
  AcquiredUnit(const AcquiredUnit&) = delete;
  AcquiredUnit& operator=(const AcquiredUnit&) = delete;

  const float* f32() const { return values_; }
  operator const float*() const { return values_; }  // NOLINT: reads as the pointer it replaces
  // Releases the unit now (at the point the model's plain release(u) stood).
  void release() {
    if (values_ == nullptr) return;
    values_ = nullptr;
    buffer_.forget();
    params_.release(unit_);
  }

 private:
  ParamAccess& params_;
  WidenBuffer& buffer_;
  int unit_;
  const float* values_;
};

class GradSink {
 public:
  virtual ~GradSink() = default;
  // fp32 gradient buffer for unit `u` (same layout as its parameters); the model ACCUMULATES into
  // it. The buffer is zero before the first call of a backward pass.
  virtual float* grad_buffer(int u) = 0;
  // The model will not touch unit u's gradient again in this backward pass (time to reduce it).
  virtual void grad_ready(int u) = 0;
};

}  // namespace zero::model
