// The CUDA backend (backend.h): CudaStreams running the project's CUDA kernels (elementwise casts
// and accumulation, the sum of squares with its non-finite flag, the fused AdamW). One GPU, chosen
// at creation. Only built with the CUDA backend (and on the CPU emulator, docs/emu.md).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <limits>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_probe.h"
#include "core/cuda/device_alloc.h"
#include "core/device.h"
#include "device/backend.h"
#include "device/cuda_stream.h"
#include "kernels/elementwise/elementwise_cuda.h"
#include "kernels/norm/norm_cuda.h"
#include "optim/adam_cuda.h"

namespace zero::device {
namespace {

void check_device(const TensorView& v, const char* what) {
  ZERO_CHECK(v.device == Device::kCuda, what, " is not device memory");
}

// f(std::type_identity<T>{}) with T the CUDA storage type of `dtype`.
template <typename F>
void with_cuda_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: f(std::type_identity<float>{}); return;
    case DType::kBF16: f(std::type_identity<__nv_bfloat16>{}); return;
    case DType::kF16: f(std::type_identity<__half>{}); return;
  }
  ZERO_CHECK(false, "unknown dtype ", static_cast<int>(dtype));
}

// The device totals of one sum_squares op, copied to pinned host memory on its stream and added
// into the caller's SumSquaresOut by a host function queued after the copy. One slot per op in
// flight, so several sum_squares queued before one synchronize each have their own totals.
struct Totals {
  double sum_sq;
  int nonfinite;
};

class SlotPool;

struct SumSquaresSlot {
  Totals* totals_dev = nullptr;   // device: the kernel's running totals
  void* scratch_dev = nullptr;    // device: the kernel's per-block partials
  Totals* totals_host = nullptr;  // pinned host: the copy of totals_dev
  SumSquaresOut* out = nullptr;   // the op's output (while the slot is in flight)
  SlotPool* pool = nullptr;
};

// Largest scratch the sum of squares needs (its grid is capped; 2^40 elements is past the cap).
size_t max_scratch_bytes() { return kernels::cuda::sum_squares_scratch_bytes(int64_t{1} << 40); }

class SlotPool {
 public:
  explicit SlotPool(int device_index) : device_index_(device_index) {}
  ~SlotPool() {
    activate_cuda_device(device_index_);
    for (auto& s : slots_) {
      cudaFree(s->totals_dev);
      cudaFree(s->scratch_dev);
      cudaFreeHost(s->totals_host);
    }
  }

  // A free slot, or a new one (the pool grows to the most ops ever in flight, then allocates no
  // more). nullptr with `err` set when the device is out of memory.
  SumSquaresSlot* acquire(cudaError_t* err) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        SumSquaresSlot* s = free_.back();
        free_.pop_back();
        return s;
      }
    }
    // Allocated without holding mu_: cudaHostAlloc may wait for the device, whose queued host
    // functions (finish) take mu_.
    auto s = std::make_unique<SumSquaresSlot>();
    s->pool = this;
    *err = cudaMalloc(&s->totals_dev, sizeof(Totals));
    if (*err == cudaSuccess) *err = cudaMalloc(&s->scratch_dev, max_scratch_bytes());
    if (*err == cudaSuccess) {
      *err = cudaHostAlloc(reinterpret_cast<void**>(&s->totals_host), sizeof(Totals),
                           cudaHostAllocDefault);
    }
    if (*err != cudaSuccess) {
      cudaFree(s->totals_dev);
      cudaFree(s->scratch_dev);
      return nullptr;
    }
    std::lock_guard<std::mutex> lock(mu_);
    slots_.push_back(std::move(s));
    return slots_.back().get();
  }

  // Host function queued after a slot's copy to the host: adds into the op's output, frees the
  // slot. Runs on the CUDA runtime's host-function thread; makes no CUDA call (not allowed there).
  static void CUDART_CB finish(void* user_data) {
    auto* s = static_cast<SumSquaresSlot*>(user_data);
    s->out->sum_sq += s->totals_host->sum_sq;
    s->out->nonfinite = s->out->nonfinite || s->totals_host->nonfinite != 0;
    s->out = nullptr;
    std::lock_guard<std::mutex> lock(s->pool->mu_);
    s->pool->free_.push_back(s);
  }

 private:
  const int device_index_;
  std::mutex mu_;
  std::vector<std::unique_ptr<SumSquaresSlot>> slots_;  // guarded by mu_
  std::vector<SumSquaresSlot*> free_;                   // guarded by mu_
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device_index) : device_index_(device_index), slots_(device_index) {}

  Device device() const override { return Device::kCuda; }

  std::unique_ptr<Stream> create_stream(const std::string& name) override {
    return std::make_unique<CudaStream>(name, device_index_);
  }
  std::unique_ptr<Event> create_event() override {
    return std::make_unique<CudaEvent>(device_index_);
  }
  std::unique_ptr<Event> create_timing_event() override {
    return std::make_unique<CudaEvent>(device_index_, /*timing=*/true);
  }
  StatusOr<double> elapsed_ms(const Event& start, const Event& end) override {
    const auto& a = static_cast<const CudaEvent&>(start);
    const auto& b = static_cast<const CudaEvent&>(end);
    activate_cuda_device(device_index_);
    // Why a host wait: the time is known once the stream has reached `end`.
    cudaError_t err = cudaEventSynchronize(b.get());
    float ms = 0.0f;
    if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, a.get(), b.get());
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return internal_error("cudaEventElapsedTime on device {}: {} ({})", device_index_,
                            cudaGetErrorString(err), static_cast<int>(err));
    }
    return static_cast<double>(ms);
  }

  StatusOr<DeviceBuffer> allocate(DType dtype, int64_t numel) override {
    ZERO_CHECK(numel >= 0, "allocate: numel ", numel);
    activate_cuda_device(device_index_);
    const size_t bytes = static_cast<size_t>(numel) * dtype_bytes(dtype);
    // Under the ZERO_DEVICE_MEMORY_LIMIT budget as the model's buffers; a refusal names the bytes
    // and what the device had (the caller adds what the buffer is for).
    const std::string what = fmt::format("a buffer of {} {} values", numel, dtype_name(dtype));
    DeviceAllocFailure failure;
    void* p = ::zero::cuda::try_device_alloc(
        {.what = what, .bytes = bytes == 0 ? 1 : bytes, .planned_bytes = -1, .advice = {}},
        &failure);
    if (p == nullptr) return resource_exhausted("{}", device_alloc_failure_reason(failure));
    // cudaFree synchronizes the device, so a buffer is never freed under a running kernel; the
    // device is the one current when the owner frees it (one GPU per rank).
    return DeviceBuffer(TensorView{p, dtype, Shape{numel}, Device::kCuda},
                        [](void* q) { (void)cudaFree(q); });
  }

  StatusOr<DeviceBuffer> allocate_host(DType dtype, int64_t numel) override {
    ZERO_CHECK(numel >= 0, "allocate_host: numel ", numel);
    activate_cuda_device(device_index_);
    const size_t bytes = static_cast<size_t>(numel) * dtype_bytes(dtype);
    void* p = nullptr;
    if (cudaError_t err = cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocDefault);
        err != cudaSuccess) {
      (void)cudaGetLastError();
      return resource_exhausted("allocating {} bytes of pinned host memory failed: {}", bytes,
                                cudaGetErrorString(err));
    }
    // cudaFreeHost waits for the device's queued work (the copies out of it included).
    return DeviceBuffer(TensorView{p, dtype, Shape{numel}, Device::kCpu},
                        [](void* q) { (void)cudaFreeHost(q); });
  }

  void transfer(Stream& stream, TensorView dst, TensorView src) override {
    ZERO_CHECK(dst.dtype == src.dtype && dst.numel() == src.numel(),
               "transfer: ", dtype_name(src.dtype), "[", src.numel(), "] into ",
               dtype_name(dst.dtype), "[", dst.numel(), "]");
    CudaStream& s = ready(stream);
    if (s.failed() || src.nbytes() == 0 || dst.data == src.data) return;
    const bool from_device = src.device == Device::kCuda;
    const bool to_device = dst.device == Device::kCuda;
    const cudaMemcpyKind kind =
        from_device ? (to_device ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                    : (to_device ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
    s.note_error(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), kind, s.get()),
                 "transfer: cudaMemcpyAsync");
  }

  void zero(Stream& stream, TensorView dst) override {
    check_device(dst, "zero: dst");
    CudaStream& s = ready(stream);
    if (s.failed()) return;
    s.note_error(cudaMemsetAsync(dst.data, 0, dst.nbytes(), s.get()), "zero: cudaMemsetAsync");
  }

  void copy(Stream& stream, TensorView dst, TensorView src) override {
    check_device(dst, "copy: dst");
    check_device(src, "copy: src");
    ZERO_CHECK(dst.numel() == src.numel(), "copy: ", dst.numel(), " vs ", src.numel(), " elements");
    CudaStream& s = ready(stream);
    if (s.failed()) return;
    if (dst.dtype == src.dtype) {
      if (dst.data == src.data || src.nbytes() == 0) return;
      s.note_error(
          cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToDevice, s.get()),
          "copy: cudaMemcpyAsync");
      return;
    }
    // Bitwise core/dtype.h's conversions; 16-bit to the other 16-bit goes through fp32 (exact),
    // rounded once, as the CPU backend does.
    with_cuda_type(src.dtype, [&](auto src_type) {
      using Src = typename decltype(src_type)::type;
      with_cuda_type(dst.dtype, [&](auto dst_type) {
        using Dst = typename decltype(dst_type)::type;
        kernels::cuda::cast<Src, Dst>(src.as<const Src>(), dst.as<Dst>(), src.numel(), s.get());
      });
    });
  }

  void accumulate(Stream& stream, TensorView acc, TensorView x) override {
    check_device(acc, "accumulate: acc");
    check_device(x, "accumulate: x");
    ZERO_CHECK(acc.dtype == DType::kF32, "accumulate: the accumulator must be fp32");
    ZERO_CHECK(acc.numel() == x.numel(), "accumulate: ", acc.numel(), " vs ", x.numel());
    CudaStream& s = ready(stream);
    if (s.failed()) return;
    with_cuda_type(x.dtype, [&](auto x_type) {
      using T = typename decltype(x_type)::type;
      kernels::cuda::accumulate_f32<T>(acc.as<float>(), x.as<const T>(), x.numel(), s.get());
    });
  }

  void host_function(Stream& stream, std::function<void()> fn) override {
    CudaStream& s = ready(stream);
    auto* owned = new std::function<void()>(std::move(fn));
    auto trampoline = [](void* p) {
      std::unique_ptr<std::function<void()>> f(static_cast<std::function<void()>*>(p));
      (*f)();
    };
    const cudaError_t err = cudaLaunchHostFunc(s.get(), trampoline, owned);
    if (err != cudaSuccess) {
      // A failed stream refuses new work; the function still runs (every rank must issue a
      // collective), here and now, and the stream keeps its first error.
      s.note_error(err, "host_function: queueing");
      trampoline(owned);
    }
  }

  void accumulate_rounded(Stream& stream, TensorView acc, TensorView x, DType dtype) override {
    if (dtype == DType::kF32) return accumulate(stream, acc, x);
    check_device(acc, "accumulate_rounded: acc");
    check_device(x, "accumulate_rounded: x");
    ZERO_CHECK(acc.dtype == DType::kF32 && x.dtype == DType::kF32,
               "accumulate_rounded: fp32 accumulator and input");
    ZERO_CHECK(acc.numel() == x.numel(), "accumulate_rounded: ", acc.numel(), " vs ", x.numel());
    CudaStream& s = ready(stream);
    if (s.failed()) return;
    if (dtype == DType::kBF16) {
      kernels::cuda::accumulate_rounded<__nv_bfloat16>(acc.as<float>(), x.as<const float>(),
                                                       x.numel(), s.get());
    } else {
      kernels::cuda::accumulate_rounded<__half>(acc.as<float>(), x.as<const float>(), x.numel(),
                                                s.get());
    }
  }

  void round_to(Stream& stream, TensorView x, DType dtype) override {
    if (dtype == DType::kF32) return;
    check_device(x, "round_to: x");
    ZERO_CHECK(x.dtype == DType::kF32, "round_to: x must be fp32");
    CudaStream& s = ready(stream);
    if (s.failed()) return;
    if (dtype == DType::kBF16) {
      kernels::cuda::round_to<__nv_bfloat16>(x.as<float>(), x.numel(), s.get());
    } else {
      kernels::cuda::round_to<__half>(x.as<float>(), x.numel(), s.get());
    }
  }

  void scale(Stream& stream, TensorView x, float factor) override {
    check_device(x, "scale: x");
    ZERO_CHECK(x.dtype == DType::kF32, "scale: x must be fp32");
    CudaStream& s = ready(stream);
    if (s.failed()) return;
    kernels::cuda::scale<float>(x.as<float>(), factor, x.numel(), s.get());
  }

  // The totals are zeroed, accumulated, copied to pinned memory and added into *out by a host
  // function, all in stream order: no host wait here, and *out is complete once the stream (or an
  // event recorded after this op) has been synchronized.
  void sum_squares(Stream& stream, TensorView x, SumSquaresOut* out) override {
    check_device(x, "sum_squares: x");
    ZERO_CHECK(out != nullptr, "sum_squares: null output");
    CudaStream& s = ready(stream);
    if (s.failed()) return;
    cudaError_t err = cudaSuccess;
    SumSquaresSlot* slot = slots_.acquire(&err);
    if (slot == nullptr) {
      s.note_error(err, "sum_squares: allocating its totals");
      return;
    }
    slot->out = out;
    err = cudaMemsetAsync(slot->totals_dev, 0, sizeof(Totals), s.get());
    if (err == cudaSuccess) {
      with_cuda_type(x.dtype, [&](auto x_type) {
        using T = typename decltype(x_type)::type;
        kernels::cuda::sum_squares_accumulate<T>(
            x.as<const T>(), x.numel(), &slot->totals_dev->sum_sq, &slot->totals_dev->nonfinite,
            slot->scratch_dev, max_scratch_bytes(), s.get());
      });
      err = cudaMemcpyAsync(slot->totals_host, slot->totals_dev, sizeof(Totals),
                            cudaMemcpyDeviceToHost, s.get());
    }
    if (err == cudaSuccess) err = cudaLaunchHostFunc(s.get(), &SlotPool::finish, slot);
    // A slot whose host function was not queued is lost to the pool (the stream has failed).
    s.note_error(err, "sum_squares: queueing");
  }

  void adamw(Stream& stream, const optim::AdamArgs& args, const AdamShardViews& shard,
             float grad_scale) override {
    for (const TensorView* v : {&shard.param, &shard.grad, &shard.exp_avg, &shard.exp_avg_sq}) {
      check_device(*v, "adamw: shard");
    }
    if (shard.param_16bit.data != nullptr) check_device(shard.param_16bit, "adamw: param_16bit");
    ZERO_CHECK(shard.prev_param.data == nullptr, "adamw: no rollback copy on the CUDA backend");
    const optim::AdamShard d = adam_shard_of(shard, "adamw (cuda)");
    CudaStream& s = ready(stream);
    if (s.failed()) return;
    optim::cuda::adam_update(args, d, grad_scale, s.get());
  }

 private:
  // The stream as a CudaStream of this backend's device, made current on the calling thread.
  CudaStream& ready(Stream& stream) const {
    ZERO_CHECK(stream.device() == Device::kCuda, "stream ", stream.name(), " is not a CUDA stream");
    auto& s = static_cast<CudaStream&>(stream);
    ZERO_CHECK(s.device_index() == device_index_, "stream ", s.name(), " is on device ",
               s.device_index(), ", the backend on ", device_index_);
    s.activate();
    return s;
  }

  const int device_index_;
  SlotPool slots_;
};

}  // namespace

StatusOr<std::unique_ptr<Backend>> make_cuda_backend(int device_index) {
  int device_count = 0;
#if defined(ZERO_CUDA_EMU)
  // The emulator (docs/emu.md) answers the device count itself; probe_cuda() asks the real driver.
  if (cudaGetDeviceCount(&device_count) != cudaSuccess) device_count = 0;
#else
  const CudaProbe& probe = probe_cuda();
  if (!probe.available) {
    return failed_precondition("the CUDA backend is built, but there is no usable GPU: {}",
                               probe.why_not);
  }
  device_count = probe.device_count;
#endif
  if (device_index < 0 || device_index >= device_count) {
    return invalid_argument("CUDA device {} requested, but {} visible (CUDA_VISIBLE_DEVICES?)",
                            device_index, device_count);
  }
  // Before any stream or buffer: a GPU held by another process in exclusive mode is a one-line
  // error naming the mode and what to do, not an abort at the first cudaSetDevice.
  ZERO_RETURN_IF_ERROR(::zero::cuda::claim_cuda_device(device_index));
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(device_index));
}

}  // namespace zero::device
