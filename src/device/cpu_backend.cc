// The CPU backend (backend.h): CpuStreams running the CPU kernels, and make_backend()'s dispatch.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "device/backend.h"

#include "kernels/adamw/adamw_simd.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/norm/norm.h"

namespace zero::device {
namespace {

CpuStream& cpu(Stream& s) {
  ZERO_CHECK(s.device() == Device::kCpu, "stream ", s.name(), " is not a CPU stream");
  return static_cast<CpuStream&>(s);
}

void check_host(const TensorView& v, const char* what) {
  ZERO_CHECK(v.device == Device::kCpu, what, " is not host memory");
}

// Elements converted to fp32 in chunks (16-bit inputs), so no op allocates a full fp32 copy.
constexpr int64_t kChunk = 1 << 14;

template <typename F>
void for_f32_chunks(const TensorView& x, F&& f) {
  const int64_t n = x.numel();
  if (x.dtype == DType::kF32) {
    f(static_cast<const float*>(x.data), int64_t{0}, n);
    return;
  }
  std::vector<float> buf(static_cast<size_t>(std::min(n, kChunk)));
  const size_t esize = dtype_bytes(x.dtype);
  for (int64_t b = 0; b < n; b += kChunk) {
    const int64_t len = std::min(kChunk, n - b);
    convert_to_f32(static_cast<const std::byte*>(x.data) + static_cast<size_t>(b) * esize, x.dtype,
                   buf.data(), static_cast<size_t>(len));
    f(buf.data(), b, len);
  }
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(StreamOptions options) : options_(options) {}

  Device device() const override { return Device::kCpu; }

  std::unique_ptr<Stream> create_stream(const std::string& name) override {
    StreamOptions o = options_;
    o.delay_seed = options_.delay_seed + 7919 * streams_created_++;  // each stream its own delays
    return std::make_unique<CpuStream>(name, o);
  }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CpuEvent>(); }

  StatusOr<DeviceBuffer> allocate(DType dtype, int64_t numel) override {
    ZERO_CHECK(numel >= 0, "allocate: numel ", numel);
    const size_t bytes = static_cast<size_t>(numel) * dtype_bytes(dtype);
    // 64-byte aligned (AVX-512 loads), rounded up as aligned_alloc requires.
    void* p = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
    if (p == nullptr) {
      return resource_exhausted("allocating {} bytes of host memory failed", bytes);
    }
    return DeviceBuffer(TensorView{p, dtype, Shape{numel}, Device::kCpu}, &std::free);
  }

  // Host memory is the CPU backend's device memory: the same allocation.
  StatusOr<DeviceBuffer> allocate_host(DType dtype, int64_t numel) override {
    return allocate(dtype, numel);
  }

  void transfer(Stream& stream, TensorView dst, TensorView src) override {
    check_host(dst, "transfer: dst");
    check_host(src, "transfer: src");
    ZERO_CHECK(dst.dtype == src.dtype && dst.numel() == src.numel(),
               "transfer: ", dtype_name(src.dtype), "[", src.numel(), "] into ",
               dtype_name(dst.dtype), "[", dst.numel(), "]");
    cpu(stream).submit([dst, src] {
      if (dst.data != src.data) std::memcpy(dst.data, src.data, src.nbytes());
      return ok_status();
    });
  }

  void zero(Stream& stream, TensorView dst) override {
    check_host(dst, "zero: dst");
    cpu(stream).submit([dst] {
      std::memset(dst.data, 0, dst.nbytes());
      return ok_status();
    });
  }

  void copy(Stream& stream, TensorView dst, TensorView src) override {
    check_host(dst, "copy: dst");
    check_host(src, "copy: src");
    ZERO_CHECK(dst.numel() == src.numel(), "copy: ", dst.numel(), " vs ", src.numel(), " elements");
    cpu(stream).submit([dst, src] {
      const size_t n = static_cast<size_t>(src.numel());
      if (dst.dtype == src.dtype) {
        if (dst.data != src.data) std::memcpy(dst.data, src.data, src.nbytes());
      } else if (src.dtype == DType::kF32) {
        kernels::cpu::cast_from_f32(static_cast<const float*>(src.data), dst.data, dst.dtype,
                                    static_cast<int64_t>(n));
      } else if (dst.dtype == DType::kF32) {
        kernels::cpu::cast_to_f32(src.data, src.dtype, static_cast<float*>(dst.data),
                                  static_cast<int64_t>(n));
      } else {  // 16-bit to the other 16-bit: through fp32 (exact), rounded once
        const size_t out_size = dtype_bytes(dst.dtype);
        for_f32_chunks(src, [&](const float* x, int64_t b, int64_t len) {
          convert_from_f32(x, static_cast<std::byte*>(dst.data) + static_cast<size_t>(b) * out_size,
                           dst.dtype, static_cast<size_t>(len));
        });
      }
      return ok_status();
    });
  }

  void accumulate(Stream& stream, TensorView acc, TensorView x) override {
    check_host(acc, "accumulate: acc");
    check_host(x, "accumulate: x");
    ZERO_CHECK(acc.dtype == DType::kF32, "accumulate: the accumulator must be fp32");
    ZERO_CHECK(acc.numel() == x.numel(), "accumulate: ", acc.numel(), " vs ", x.numel());
    cpu(stream).submit([acc, x] {
      float* a = static_cast<float*>(acc.data);
      for_f32_chunks(x, [&](const float* v, int64_t b, int64_t len) {
        kernels::cpu::accumulate<float>(a + b, v, len);
      });
      return ok_status();
    });
  }

  void host_function(Stream& stream, std::function<void()> fn) override {
    cpu(stream).enqueue_always(std::move(fn));
  }

  void accumulate_rounded(Stream& stream, TensorView acc, TensorView x, DType dtype) override {
    if (dtype == DType::kF32) return accumulate(stream, acc, x);
    check_host(acc, "accumulate_rounded: acc");
    check_host(x, "accumulate_rounded: x");
    ZERO_CHECK(acc.dtype == DType::kF32 && x.dtype == DType::kF32,
               "accumulate_rounded: fp32 accumulator and input");
    ZERO_CHECK(acc.numel() == x.numel(), "accumulate_rounded: ", acc.numel(), " vs ", x.numel());
    cpu(stream).submit([acc, x, dtype] {
      kernels::cpu::accumulate_rounded(static_cast<float*>(acc.data),
                                       static_cast<const float*>(x.data), dtype, x.numel());
      return ok_status();
    });
  }

  void round_to(Stream& stream, TensorView x, DType dtype) override {
    if (dtype == DType::kF32) return;
    check_host(x, "round_to: x");
    ZERO_CHECK(x.dtype == DType::kF32, "round_to: x must be fp32");
    cpu(stream).submit([x, dtype] {
      float* v = static_cast<float*>(x.data);
      kernels::cpu::round_to_dtype(v, v, dtype, x.numel());
      return ok_status();
    });
  }

  void scale(Stream& stream, TensorView x, float s) override {
    check_host(x, "scale: x");
    ZERO_CHECK(x.dtype == DType::kF32, "scale: x must be fp32");
    cpu(stream).submit([x, s] {
      kernels::cpu::scale<float>(static_cast<float*>(x.data), s, x.numel());
      return ok_status();
    });
  }

  void sum_squares(Stream& stream, TensorView x, SumSquaresOut* out) override {
    check_host(x, "sum_squares: x");
    cpu(stream).submit([x, out] {
      for_f32_chunks(x, [&](const float* v, int64_t, int64_t len) {
        const kernels::cpu::SumSquares r = kernels::cpu::sum_squares(v, len);
        out->sum_sq += r.sum_sq;
        out->nonfinite = out->nonfinite || r.nonfinite;
      });
      return ok_status();
    });
  }

  void adamw(Stream& stream, const optim::AdamArgs& args, const AdamShardViews& shard,
             float grad_scale) override {
    const TensorView* views[] = {&shard.param,          &shard.grad,       &shard.exp_avg,
                                 &shard.exp_avg_sq,     &shard.prev_param, &shard.prev_exp_avg,
                                 &shard.prev_exp_avg_sq};
    const int checked = shard.prev_param.data != nullptr ? 7 : 4;  // the rollback copy is optional
    for (int i = 0; i < checked; ++i) check_host(*views[i], "adamw: shard");
    const optim::AdamShard s = adam_shard_of(shard, "adamw");
    cpu(stream).submit([args, s, grad_scale] {
      // The vectorised CPU Adam (DeepSpeedCPUAdam's role), bitwise optim::adam_update.
      kernels::cpu::adam_update_simd(args, s, grad_scale);
      return ok_status();
    });
  }

 private:
  StreamOptions options_;
  uint64_t streams_created_ = 0;
};

}  // namespace

optim::AdamShard adam_shard_of(const AdamShardViews& v, const char* who) {
  const int64_t numel = v.param.numel();
  auto state = [&](const TensorView& x, bool master) {
    ZERO_CHECK(x.numel() == numel, who, ": state numel ", x.numel(), " != param numel ", numel);
    ZERO_CHECK(x.dtype == DType::kF32 || x.dtype == DType::kBF16, who, ": ",
               master ? "master weights" : "moments", " must be fp32 or bf16, got ",
               dtype_name(x.dtype));
  };
  state(v.param, true);
  state(v.exp_avg, false);
  state(v.exp_avg_sq, false);
  ZERO_CHECK(v.exp_avg.dtype == v.exp_avg_sq.dtype, who, ": exp_avg and exp_avg_sq dtypes differ");
  const bool prev = v.prev_param.data != nullptr;
  for (const TensorView* x : {&v.grad, &v.prev_param, &v.prev_exp_avg, &v.prev_exp_avg_sq}) {
    if (x != &v.grad && !prev) break;
    ZERO_CHECK(x->dtype == DType::kF32 && x->numel() == numel, who,
               ": grad and rollback copies must be fp32 of the param's numel");
  }
  if (v.param_16bit.data != nullptr) {
    ZERO_CHECK(v.param_16bit.numel() == numel, who, ": param_16bit numel ", v.param_16bit.numel(),
               " != ", numel);
  }
  optim::AdamShard s;
  if (v.param.dtype == DType::kBF16) {
    s.param_bf16 = v.param.as<bf16>();
  } else {
    s.param = v.param.as<float>();
  }
  if (v.exp_avg.dtype == DType::kBF16) {
    s.exp_avg_bf16 = v.exp_avg.as<bf16>();
    s.exp_avg_sq_bf16 = v.exp_avg_sq.as<bf16>();
  } else {
    s.exp_avg = v.exp_avg.as<float>();
    s.exp_avg_sq = v.exp_avg_sq.as<float>();
  }
  s.grad = v.grad.as<const float>();
  s.numel = numel;
  s.param_16bit = v.param_16bit.data;
  s.param_16bit_dtype = v.param_16bit.dtype;
  if (prev) {
    s.prev_param = v.prev_param.as<float>();
    s.prev_exp_avg = v.prev_exp_avg.as<float>();
    s.prev_exp_avg_sq = v.prev_exp_avg_sq.as<float>();
  }
  // The kernels' own REQUIRES (a bf16 master for bf16 moments, no rollback copy of bf16 state).
  kernels::check_adam_call(optim::AdamArgs{}, s, who);
  return s;
}

std::unique_ptr<Backend> make_cpu_backend(StreamOptions options) {
  return std::make_unique<CpuBackend>(options);
}

StatusOr<std::unique_ptr<Backend>> make_backend(Device device, StreamOptions options) {
  switch (device) {
    case Device::kCpu: return make_cpu_backend(options);
    case Device::kCuda:
#if defined(ZERO_WITH_CUDA)
      return make_cuda_backend(options.cuda_device);
#else
      return failed_precondition(
          "this build has no CUDA backend (built without CUDA: configure with nvcc installed, or "
          "-DZERO_CUDA=ON); use the CPU backend");
#endif
  }
  return invalid_argument("unknown device");
}

StatusOr<std::unique_ptr<ExecutionContext>> ExecutionContext::create(Device device,
                                                                     StreamOptions options) {
  auto ctx = std::unique_ptr<ExecutionContext>(new ExecutionContext());
  ZERO_ASSIGN_OR_RETURN(ctx->backend_, make_backend(device, options));
  ctx->compute_ = ctx->backend_->create_stream("compute");
  ctx->comm_ = ctx->backend_->create_stream("comm");
  return ctx;
}

std::unique_ptr<ExecutionContext> ExecutionContext::create_host() {
  auto ctx = std::unique_ptr<ExecutionContext>(new ExecutionContext());
  StreamOptions inline_ops;
  inline_ops.inline_host = true;
  ctx->backend_ = make_cpu_backend(inline_ops);
  ctx->compute_ = ctx->backend_->create_stream("compute");
  ctx->comm_ = std::make_unique<CpuStream>("comm");  // a worker (ZERO_STREAM_DELAY_US applies)
  return ctx;
}

}  // namespace zero::device
