// OffloadPipeline (offload_pipeline.h).
#include "runtime/offload_pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "core/check.h"
#include "kernels/elementwise/elementwise.h"

namespace zero::runtime {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string offload_log_line(const OffloadTimes& now, const OffloadTimes& before, int64_t steps) {
  const double n = static_cast<double>(std::max<int64_t>(steps, 1));
  return fmt::format(
      "offload (ms) | d2h wait: {:.2f} | cpu adam: {:.2f} | upload: {:.2f} | after bwd wait: "
      "{:.2f} "
      "| finish: {:.2f} | overlapped units: {:.1f} | h2d MB: {:.2f}",
      (now.download_wait_ms - before.download_wait_ms) / n,
      (now.cpu_adam_ms - before.cpu_adam_ms) / n, (now.upload_ms - before.upload_ms) / n,
      (now.overlap_wait_ms - before.overlap_wait_ms) / n,
      (now.finish_wait_ms - before.finish_wait_ms) / n,
      static_cast<double>(now.overlapped_units - before.overlapped_units) / n,
      static_cast<double>(now.upload_bytes - before.upload_bytes) / n / 1e6);
}

std::string param_offload_log_line(const sharding::ParamTransfers& now,
                                   const sharding::ParamTransfers& before, int64_t steps) {
  const double n = static_cast<double>(std::max<int64_t>(steps, 1));
  return fmt::format("param offload | h2d MB: {:.2f} | d2h MB: {:.2f} | uploads: {:.1f}",
                     static_cast<double>(now.h2d_bytes - before.h2d_bytes) / n / 1e6,
                     static_cast<double>(now.d2h_bytes - before.d2h_bytes) / n / 1e6,
                     static_cast<double>(now.uploads - before.uploads) / n);
}

OffloadPipeline::OffloadPipeline(device::ExecutionContext& ctx, DType model_dtype)
    : ctx_(ctx), model_dtype_(model_dtype) {}

int64_t OffloadPipeline::pinned_host_bytes(int64_t max_partition_numel, DType model_dtype) {
  const int64_t numel = std::max<int64_t>(max_partition_numel, 1);
  // Two fp32 gradient slots and two upload slots in the model dtype.
  return 2 * numel * static_cast<int64_t>(sizeof(float) + dtype_bytes(model_dtype));
}

StatusOr<std::unique_ptr<OffloadPipeline>> OffloadPipeline::create(
    device::ExecutionContext& ctx, int64_t max_partition_numel, DType model_dtype,
    sharding::MemoryAccounting& memory) {
  std::unique_ptr<OffloadPipeline> p(new OffloadPipeline(ctx, model_dtype));
  device::Backend& backend = ctx.backend();
  const int64_t numel = std::max<int64_t>(max_partition_numel, 1);
  p->d2h_ = backend.create_stream("offload_d2h");
  p->h2d_ = backend.create_stream("offload_h2d");
  p->grads_final_ = backend.create_event();
  for (int s = 0; s < 2; ++s) {
    auto host = [&](device::DeviceBuffer& buf, DType dtype, const char* what) -> Status {
      StatusOr<device::DeviceBuffer> b = backend.allocate_host(dtype, numel);
      if (!b.ok()) return b.status().with_context(fmt::format("offload pipeline: {}", what));
      buf = std::move(*b);
      memory.pinned_bytes += static_cast<int64_t>(buf.view().nbytes());
      return ok_status();
    };
    ZERO_RETURN_IF_ERROR(host(p->grad_host_[s], DType::kF32, "gradient slot"));
    ZERO_RETURN_IF_ERROR(host(p->upload_host_[s], model_dtype, "upload slot"));
    StatusOr<device::DeviceBuffer> d = backend.allocate(model_dtype, numel);
    if (!d.ok()) return d.status().with_context("offload pipeline: device upload slot");
    p->upload_dev_[s] = std::move(*d);
    p->downloaded_[s] = backend.create_event();
    p->uploaded_[s] = backend.create_event();
    p->cast_done_[s] = backend.create_event();
  }
  return p;
}

OffloadPipeline::~OffloadPipeline() {
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  // Why host waits: the copies may still read or write the slots freed below (errors were
  // reported by finish(), or belong to a step that already failed).
  (void)d2h_->synchronize();
  (void)h2d_->synchronize();
  // The compute stream's casts read the device upload slots.
  (void)ctx_.compute().synchronize();
}

void OffloadPipeline::begin_downloads(std::vector<int> order, DeviceGradFn device_grad) {
  ZERO_CHECK(next_read_ == order_.size(), "offload pipeline: a step's downloads began before the ",
             "previous step's were read (", next_read_, " of ", order_.size(), ")");
  order_ = std::move(order);
  device_grad_ = std::move(device_grad);
  next_download_ = next_read_ = 0;
  // The gradients are final once the compute stream's work queued so far has run (backward, the
  // reducer's accumulation and the norm): the copies wait for that point, not the host.
  ctx_.compute().record(*grads_final_);
  d2h_->wait(*grads_final_);
  for (int s = 0; s < 2; ++s) start_download(s);
}

void OffloadPipeline::start_download(int slot) {
  grad_unit_[slot] = -1;
  if (next_download_ >= order_.size()) return;
  const int u = order_[next_download_++];
  const TensorView src = device_grad_(u);
  ZERO_CHECK(src.numel() <= grad_host_[slot].numel(), "offload pipeline: unit ", u, " has ",
             src.numel(), " gradient values, slots hold ", grad_host_[slot].numel());
  ctx_.backend().transfer(
      *d2h_, TensorView{grad_host_[slot].data(), DType::kF32, Shape{src.numel()}, Device::kCpu},
      src);
  d2h_->record(*downloaded_[slot]);
  grad_unit_[slot] = u;
}

const float* OffloadPipeline::host_grad(int u) {
  ZERO_CHECK(next_read_ < order_.size() && order_[next_read_] == u, "offload pipeline: unit ", u,
             " asked for out of the download order");
  const int slot = static_cast<int>(next_read_ % 2);
  ZERO_CHECK(grad_unit_[slot] == u, "offload pipeline: slot ", slot, " holds unit ",
             grad_unit_[slot], ", not ", u);
  const auto t0 = std::chrono::steady_clock::now();
  // Why a host wait: the CPU Adam reads this gradient next.
  downloaded_[slot]->synchronize();
  const double waited = ms_since(t0);
  std::lock_guard<std::mutex> lock(mu_);
  times_.download_wait_ms += waited;
  return static_cast<const float*>(grad_host_[slot].data());
}

void OffloadPipeline::release_grad(int u) {
  const int slot = static_cast<int>(next_read_ % 2);
  ZERO_CHECK(grad_unit_[slot] == u, "offload pipeline: release of unit ", u, " not in slot ", slot);
  ++next_read_;
  start_download(slot);
}

Status OffloadPipeline::upload(const TensorView& master,
                               const std::function<Status(const void* device_values)>& install) {
  const int64_t numel = master.numel();
  const int slot = next_upload_slot_;
  next_upload_slot_ = 1 - next_upload_slot_;
  ZERO_CHECK(numel <= upload_host_[slot].numel(), "offload pipeline: upload of ", numel,
             " values, slots hold ", upload_host_[slot].numel());
  const auto t0 = std::chrono::steady_clock::now();
  void* host = upload_host_[slot].data();
  if (filled_numel_ >= 0) {
    // next_upload_host waited for the slot, and the caller wrote the rounded values.
    ZERO_CHECK(filled_numel_ == numel, "offload pipeline: upload of ", numel,
               " values after next_upload_host(", filled_numel_, ")");
    filled_numel_ = -1;
  } else {
    // Why a host wait: the slot is rewritten below; the copy out of it (two uploads ago) must
    // have run. It has normally finished during the CPU Adam of the unit in between.
    uploaded_[slot]->synchronize();
    // Rounded here, not on the device: a 16-bit model's values cross in half the bytes (the same
    // round-to-nearest-even as the device cast; fp32 is a plain copy, and so are values already in
    // the model dtype).
    if (master.dtype == DType::kF32) {
      kernels::cpu::cast_from_f32(static_cast<const float*>(master.data), host, model_dtype_,
                                  numel);
    } else {
      ZERO_CHECK(master.dtype == model_dtype_, "offload pipeline: upload of ",
                 dtype_name(master.dtype), " values for a ", dtype_name(model_dtype_), " model");
      std::memcpy(host, master.data, master.nbytes());
    }
  }
  // The device slot is rewritten only after the compute stream's copy out of it (two uploads ago).
  h2d_->wait(*cast_done_[slot]);
  const TensorView dev{upload_dev_[slot].data(), model_dtype_, Shape{numel}, ctx_.device()};
  ctx_.backend().transfer(*h2d_, dev, TensorView{host, model_dtype_, Shape{numel}, Device::kCpu});
  h2d_->record(*uploaded_[slot]);
  // The casts install queues on the compute stream read the copy.
  ctx_.compute().wait(*uploaded_[slot]);
  {
    std::lock_guard<std::mutex> lock(mu_);
    times_.upload_ms += ms_since(t0);
    times_.upload_values += numel;
    times_.upload_bytes += static_cast<int64_t>(dev.nbytes());
  }
  Status s = install(dev.data);
  ctx_.compute().record(*cast_done_[slot]);
  return s;
}

void* OffloadPipeline::next_upload_host(int64_t numel) {
  if (model_dtype_ == DType::kF32) return nullptr;
  const int slot = next_upload_slot_;
  ZERO_CHECK(filled_numel_ < 0, "offload pipeline: next_upload_host twice without an upload");
  ZERO_CHECK(numel <= upload_host_[slot].numel(), "offload pipeline: upload of ", numel,
             " values, slots hold ", upload_host_[slot].numel());
  const auto t0 = std::chrono::steady_clock::now();
  // Why a host wait: the caller rewrites the slot next; the copy out of it (two uploads ago) must
  // have run (as in upload()).
  uploaded_[slot]->synchronize();
  filled_numel_ = numel;
  std::lock_guard<std::mutex> lock(mu_);
  times_.upload_ms += ms_since(t0);
  times_.caller_rounded_values += numel;
  return upload_host_[slot].data();
}

Status OffloadPipeline::finish() {
  const auto t0 = std::chrono::steady_clock::now();
  // Why host waits: a failed copy is this step's error, reported now; after an error half-way the
  // remaining downloads must land before their slots are reused. The downloads were all waited for
  // already on a full step; the wait on the uploads is at most the last unit's copy.
  Status down = d2h_->synchronize();
  Status up = h2d_->synchronize();
  {
    std::lock_guard<std::mutex> lock(mu_);
    times_.finish_wait_ms += ms_since(t0);
  }
  next_read_ = order_.size();
  grad_unit_[0] = grad_unit_[1] = -1;
  filled_numel_ = -1;  // a step that failed between next_upload_host and upload
  if (!down.ok()) return down.with_context("copying gradients to the host (offload_optimizer)");
  if (!up.ok()) return up.with_context("copying master weights to the device (offload_optimizer)");
  return ok_status();
}

void OffloadPipeline::add_adam_ms(double ms) {
  std::lock_guard<std::mutex> lock(mu_);
  times_.cpu_adam_ms += ms;
}

OffloadTimes OffloadPipeline::times() const {
  std::lock_guard<std::mutex> lock(mu_);
  return times_;
}

void OffloadPipeline::begin_overlap(HostUpdateFn update) {
  ZERO_CHECK(!overlapping_, "offload pipeline: begin_overlap twice");
  ZERO_CHECK(next_read_ == order_.size(), "offload pipeline: overlap during a step's downloads");
  {
    std::lock_guard<std::mutex> lock(mu_);
    update_ = std::move(update);
    handed_count_ = 0;
    done_.clear();
  }
  overlapping_ = true;
  if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
}

void OffloadPipeline::partition_final(int u, TensorView device_grad, device::Stream& ready) {
  hand_over(Handed{u, device_grad, nullptr}, ready);
}

void OffloadPipeline::partition_final_on_host(int u, const float* host_grad,
                                              device::Stream& ready) {
  hand_over(Handed{u, TensorView{}, nullptr, host_grad}, ready);
}

void OffloadPipeline::hand_over(Handed h, device::Stream& ready) {
  ZERO_CHECK(overlapping_, "offload pipeline: partition_final outside an overlap");
  const auto u = static_cast<size_t>(h.u);
  if (u >= final_events_.size()) final_events_.resize(u + 1);
  std::unique_ptr<device::Event>& ev = final_events_[u];
  if (ev == nullptr) ev = ctx_.backend().create_event();
  // The download (or, for a host partition, the worker) waits for this point of the stream the
  // partition is made on, not the host thread.
  ready.record(*ev);
  h.final = ev.get();
  {
    std::lock_guard<std::mutex> lock(mu_);
    handed_.push_back(h);
    ++handed_count_;
  }
  cv_.notify_all();
}

std::vector<int> OffloadPipeline::end_overlap() {
  ZERO_CHECK(overlapping_, "offload pipeline: end_overlap without begin_overlap");
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  // Why a host wait: the step's update decision (and the uploads after it) need every handed-over
  // unit updated; it is what is left of the CPU Adam after backward.
  cv_.wait(lock, [&] { return static_cast<int64_t>(done_.size()) == handed_count_; });
  times_.overlap_wait_ms += ms_since(t0);
  overlapping_ = false;
  update_ = nullptr;
  return std::move(done_);
}

void OffloadPipeline::worker_loop() {
  struct InFlight {
    int u;
    int slot;  // -1: a host partition, read in place
    const float* host_grad;
    device::Event* final;
  };
  std::deque<InFlight> in_flight;  // downloads queued, in order
  bool slot_busy[2] = {false, false};
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !handed_.empty() || !in_flight.empty(); });
    if (stop_ && in_flight.empty()) return;
    // Queue the downloads of handed-over units while a slot is free: the next unit's copy runs
    // during this one's update.
    while (!handed_.empty() &&
           (handed_.front().host_grad != nullptr || !slot_busy[0] || !slot_busy[1])) {
      const Handed h = handed_.front();
      handed_.pop_front();
      if (h.host_grad != nullptr) {
        in_flight.push_back(InFlight{h.u, -1, h.host_grad, h.final});
        continue;
      }
      const int slot = slot_busy[0] ? 1 : 0;
      slot_busy[slot] = true;
      ZERO_CHECK(h.device_grad.numel() <= grad_host_[slot].numel(), "offload pipeline: unit ", h.u,
                 " has ", h.device_grad.numel(), " gradient values, slots hold ",
                 grad_host_[slot].numel());
      d2h_->wait(*h.final);
      ctx_.backend().transfer(*d2h_,
                              TensorView{grad_host_[slot].data(), DType::kF32,
                                         Shape{h.device_grad.numel()}, Device::kCpu},
                              h.device_grad);
      d2h_->record(*downloaded_[slot]);
      in_flight.push_back(InFlight{h.u, slot, nullptr, nullptr});
    }
    if (in_flight.empty()) continue;
    const InFlight f = in_flight.front();
    in_flight.pop_front();
    const HostUpdateFn update = update_;
    lock.unlock();
    auto t0 = std::chrono::steady_clock::now();
    // Why a wait (the worker's, not the host thread's): the update reads this gradient next.
    if (f.slot >= 0) {
      downloaded_[f.slot]->synchronize();
    } else {
      f.final->synchronize();
    }
    const double waited = ms_since(t0);
    t0 = std::chrono::steady_clock::now();
    update(f.u, f.slot >= 0 ? static_cast<const float*>(grad_host_[f.slot].data()) : f.host_grad);
    const double updated = ms_since(t0);
    lock.lock();
    times_.download_wait_ms += waited;
    times_.cpu_adam_ms += updated;
    ++times_.overlapped_units;
    if (f.slot >= 0) slot_busy[f.slot] = false;
    done_.push_back(f.u);
    cv_.notify_all();
  }
}

namespace {

// Floats between a unit's rollback copies: its partition rounded up to whole 64-byte lines, so
// the three copies share their alignment (the CPU Adam streams them when they do).
int64_t rollback_stride(int64_t partition_numel) { return (partition_numel + 15) / 16 * 16; }

}  // namespace

int64_t OffloadPipeline::keep_rollback(const std::vector<int64_t>& partition_numel) {
  rollback_numel_ = partition_numel;
  rollback_offset_.assign(partition_numel.size() + 1, 0);
  int64_t numel = 0;  // without the padding
  for (size_t u = 0; u < partition_numel.size(); ++u) {
    rollback_offset_[u + 1] = rollback_offset_[u] + 3 * rollback_stride(partition_numel[u]);
    numel += 3 * partition_numel[u];
  }
  rollback_ = aligned_alloc_bytes(static_cast<size_t>(rollback_offset_.back()) * sizeof(float));
  return numel * static_cast<int64_t>(sizeof(float));
}

float* OffloadPipeline::rollback_copy(int u, int k) {
  const size_t i = static_cast<size_t>(u);
  return reinterpret_cast<float*>(rollback_.get()) + rollback_offset_[i] +
         k * rollback_stride(rollback_numel_[i]);
}

void OffloadPipeline::restore_rollback(int u, float* master, float* exp_avg, float* exp_avg_sq) {
  const int64_t n = rollback_numel_[static_cast<size_t>(u)];
  float* const dst[3] = {master, exp_avg, exp_avg_sq};
  const float* const keep[3] = {rollback_copy(u, 0), rollback_copy(u, 1), rollback_copy(u, 2)};
  const int64_t chunk = int64_t{1} << 16;
  const int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) collapse(2)
  for (int k = 0; k < 3; ++k) {
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t lo = c * chunk, hi = std::min(n, lo + chunk);
      std::memcpy(dst[k] + lo, keep[k] + lo, static_cast<size_t>(hi - lo) * sizeof(float));
    }
  }
}

}  // namespace zero::runtime
