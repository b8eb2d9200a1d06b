// Device staging (device_staging.h).
#include "runtime/device_staging.h"

#include <utility>

#include <fmt/format.h>

#include "core/check.h"
#include "core/device_memory_budget.h"

namespace zero::runtime {
namespace {

// Grows `buf` to hold `numel` elements of `dtype` (contents not kept: each use overwrites it).
void ensure(device::Backend& backend, device::Stream& stream, device::DeviceBuffer& buf,
            DType dtype, int64_t numel, const char* what, int u) {
  if (buf.data() != nullptr && buf.view().dtype == dtype && buf.numel() >= numel) return;
  // Why a host wait: the old buffer may still be read by queued kernels; freeing it must wait.
  // (Errors of that work stay with the stream's owner: the adapters' next synchronize reports.)
  if (buf.data() != nullptr) (void)stream.synchronize();
  StatusOr<device::DeviceBuffer> fresh = backend.allocate(dtype, numel);
  if (!fresh.ok()) exit_out_of_device_memory(fmt::format("{} of unit {}", what, u), fresh.status());
  buf = std::move(*fresh);
}

TensorView view_of(void* data, DType dtype, int64_t numel, Device device) {
  return TensorView{data, dtype, Shape{numel}, device};
}

}  // namespace

StagedParams::StagedParams(model::ParamAccess& host, device::ExecutionContext& ctx, int num_units)
    : host_(host), ctx_(ctx), units_(static_cast<size_t>(num_units)) {
  for (int u = 0; u < num_units; ++u) uploaded_.push_back(ctx.backend().create_event());
}

StagedParams::~StagedParams() {
  // Why a host wait: queued kernels may still read the device units freed below.
  (void)ctx_.compute().synchronize();
}

model::ParamView StagedParams::acquire(int u) {
  const model::ParamView hv = host_.acquire(u);
  ZERO_CHECK(hv.device == Device::kCpu, "staged parameters: unit ", u, " is not in host memory");
  device::DeviceBuffer& buf = units_[static_cast<size_t>(u)];
  ensure(ctx_.backend(), ctx_.compute(), buf, hv.dtype, hv.numel, "device parameters", u);
  ctx_.backend().transfer(ctx_.compute(), view_of(buf.data(), hv.dtype, hv.numel, ctx_.device()),
                          view_of(const_cast<void*>(hv.data), hv.dtype, hv.numel, Device::kCpu));
  ctx_.compute().record(*uploaded_[static_cast<size_t>(u)]);
  return model::ParamView{buf.data(), hv.dtype, ctx_.device(), hv.numel};
}

void StagedParams::release(int u) {
  // Why a host wait: after release the coordinator may free or overwrite the host unit (stage 3),
  // so the copy out of it must have run (the kernels reading the device copy need not have).
  uploaded_[static_cast<size_t>(u)]->synchronize();
  host_.release(u);
}

int64_t StagedParams::device_bytes() const {
  int64_t n = 0;
  for (const device::DeviceBuffer& b : units_) n += static_cast<int64_t>(b.view().nbytes());
  return n;
}

StagedGrads::StagedGrads(model::GradSink& host, device::ExecutionContext& ctx,
                         const model::ModelLayout& layout)
    : host_(host),
      ctx_(ctx),
      layout_(layout),
      grads_(static_cast<size_t>(layout.num_units())),
      host_grads_(static_cast<size_t>(layout.num_units()), nullptr) {}

StagedGrads::~StagedGrads() {
  // Why a host wait: queued kernels may still write the device buffers freed below.
  (void)ctx_.compute().synchronize();
}

float* StagedGrads::grad_buffer(int u) {
  const size_t i = static_cast<size_t>(u);
  device::DeviceBuffer& buf = grads_[i];
  if (host_grads_[i] == nullptr) {
    const int64_t n = layout_.unit(u).numel;
    host_grads_[i] = host_.grad_buffer(u);
    ensure(ctx_.backend(), ctx_.compute(), buf, DType::kF32, n, "device gradients", u);
    ctx_.backend().transfer(ctx_.compute(), view_of(buf.data(), DType::kF32, n, ctx_.device()),
                            view_of(host_grads_[i], DType::kF32, n, Device::kCpu));
  }
  return static_cast<float*>(buf.data());
}

void StagedGrads::grad_ready(int u) {
  const size_t i = static_cast<size_t>(u);
  ZERO_CHECK(host_grads_[i] != nullptr, "grad_ready(", u, ") without grad_buffer");
  const int64_t n = layout_.unit(u).numel;
  ctx_.backend().transfer(ctx_.compute(), view_of(host_grads_[i], DType::kF32, n, Device::kCpu),
                          view_of(grads_[i].data(), DType::kF32, n, ctx_.device()));
  // Why a host wait: the reducer reads (and may send) the host gradient when grad_ready returns.
  if (Status s = ctx_.compute().synchronize(); !s.ok() && status_.ok()) status_ = std::move(s);
  host_grads_[i] = nullptr;
  host_.grad_ready(u);
}

int64_t StagedGrads::device_bytes() const {
  int64_t n = 0;
  for (const device::DeviceBuffer& b : grads_) n += static_cast<int64_t>(b.view().nbytes());
  return n;
}

}  // namespace zero::runtime
