// Backend: what the engine needs from a device — streams, events and the small set of ops ZeRO
// queues between the model's kernels (issue 10 item 1). The engine is written once against this
// table; make_backend() is the one place that picks an implementation by Device.
//
// Every op is queued on the given stream and returns at once (no host wait). Views must be memory
// of the backend's device, stay valid and not be touched by other streams until the op is known to
// have run (an event recorded after it, or a synchronize). Shapes: ops see a view as its numel()
// elements.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "device/cpu_stream.h"
#include "device/stream.h"
#include "optim/adam.h"

namespace zero::device {

// Sum of squares (accumulated in double) and a non-finite flag, filled in when the op runs.
struct SumSquaresOut {
  double sum_sq = 0.0;
  bool nonfinite = false;
};

// One shard's AdamW state as views (master weights and moments in fp32, or bf16 as
// optim::AdamShard allows; fp32 grad; optional 16-bit working copy).
struct AdamShardViews {
  TensorView param, grad, exp_avg, exp_avg_sq;
  TensorView param_16bit;  // data == nullptr: none
  // Optional (all three or none; data == nullptr: none), host backends only: param, exp_avg and
  // exp_avg_sq as they were before the update, written in the same pass (a rollback copy).
  TensorView prev_param, prev_exp_avg, prev_exp_avg_sq;
};

// The kernel's shard for `views`: each state view to the fp32 or bf16 pointer its dtype names.
// Checks (ZERO_CHECK, `who` in the message) one numel for all, an fp32 grad and rollback copy, and
// state dtypes the kernels take (optim::AdamShard: fp32, or a bf16 master with fp32 or bf16
// moments). Devices are the caller's to check.
optim::AdamShard adam_shard_of(const AdamShardViews& views, const char* who);

// Memory of one backend's device, freed on destruction (after the work reading it: the owner
// synchronizes the streams that use it first). A moved-from buffer is empty (data() null).
class DeviceBuffer {
 public:
  using Free = void (*)(void*);
  DeviceBuffer() = default;
  DeviceBuffer(TensorView view, Free free) : view_(view), free_(free) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : view_(o.view_), free_(o.free_) {
    o.view_ = TensorView{};
    o.free_ = nullptr;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      view_ = o.view_;
      free_ = o.free_;
      o.view_ = TensorView{};
      o.free_ = nullptr;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  const TensorView& view() const { return view_; }
  void* data() const { return view_.data; }
  int64_t numel() const { return view_.numel(); }

 private:
  void reset() {
    if (free_ != nullptr && view_.data != nullptr) free_(view_.data);
    free_ = nullptr;
  }
  TensorView view_;
  Free free_ = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::unique_ptr<Stream> create_stream(const std::string& name) = 0;
  virtual std::unique_ptr<Event> create_event() = 0;
  // An event that also notes when its stream reaches it, for timing device work (the
  // wall_clock_breakdown on a GPU: cudaEventCreate with timing). nullptr when this backend has no
  // device clock (the CPU backend: its work is timed on the host).
  virtual std::unique_ptr<Event> create_timing_event() { return nullptr; }
  // Milliseconds between the most recent records of two of this backend's timing events, after a
  // host wait for `end`. An error when either was never recorded.
  virtual StatusOr<double> elapsed_ms(const Event& start, const Event& end) {
    (void)start;
    (void)end;
    return unimplemented("this backend has no timing events");
  }

  // `numel` elements of `dtype` in this device's memory (contents undefined). Fails with a message
  // naming the size when the device is out of memory.
  virtual StatusOr<DeviceBuffer> allocate(DType dtype, int64_t numel) = 0;
  // `numel` elements of `dtype` in host memory that this backend's transfers read or write when
  // their stream reaches them, without staging: page-locked on CUDA (cudaHostAlloc), ordinary
  // aligned memory on the CPU backend. A DeviceBuffer whose view is Device::kCpu; free it only
  // after the transfers using it are known to have run. Fails with a message naming the size.
  virtual StatusOr<DeviceBuffer> allocate_host(DType dtype, int64_t numel) = 0;
  // dst = src, bytes as they are, between host memory and this device's memory in either direction
  // (or within one of them): same dtype and numel. Host memory must stay untouched until the copy
  // is known to have run.
  virtual void transfer(Stream& stream, TensorView dst, TensorView src) = 0;

  // dst = 0.
  virtual void zero(Stream& stream, TensorView dst) = 0;
  // dst = src converted to dst.dtype, bitwise as core/dtype.h (round to nearest even). Same numel;
  // no overlap unless dst and src are the same view of the same dtype.
  virtual void copy(Stream& stream, TensorView dst, TensorView src) = 0;
  // acc (fp32) += float(x), x of any dtype.
  virtual void accumulate(Stream& stream, TensorView acc, TensorView x) = 0;
  // acc (fp32) += float(round(x, dtype)): x (fp32) rounded to the 16-bit `dtype` first (a 16-bit
  // model's gradient as its backward would produce it), in one pass; bitwise copy() into a `dtype`
  // buffer followed by accumulate(). `dtype` fp32: accumulate().
  virtual void accumulate_rounded(Stream& stream, TensorView acc, TensorView x, DType dtype) = 0;
  // x (fp32) = float(round(x, dtype)) in place (`dtype` fp32: nothing).
  virtual void round_to(Stream& stream, TensorView x, DType dtype) = 0;
  // x (fp32) *= s.
  virtual void scale(Stream& stream, TensorView x, float s) = 0;
  // out->sum_sq += sum(float(x)^2) in double; out->nonfinite |= any inf / NaN in x. `out` is host
  // memory, read after the stream (or an event after the op) was synchronized.
  virtual void sum_squares(Stream& stream, TensorView x, SumSquaresOut* out) = 0;
  // Runs `fn` on a host thread when `stream` reaches it; the stream's later work waits for it to
  // return (CUDA: cudaLaunchHostFunc's thread; CPU: the stream's worker, or the caller of an
  // inline stream). It runs even after a failed op on the stream (a collective that every rank must
  // issue). `fn` must not call the backend or the CUDA API; it may block (a host collective).
  virtual void host_function(Stream& stream, std::function<void()> fn) = 0;
  // One AdamW / Adam-L2 step of a shard (optim::adam_update's math, bitwise: the CPU backend runs
  // the vectorised CPU Adam, kernels/adamw/adamw_simd.h; the CUDA one its fused kernel).
  virtual void adamw(Stream& stream, const optim::AdamArgs& args, const AdamShardViews& shard,
                     float grad_scale) = 0;
};

// The CPU backend: CpuStreams (one worker thread each) running the CPU kernels.
std::unique_ptr<Backend> make_cpu_backend(StreamOptions options = {});

// The CUDA backend on GPU `device_index` (device/cuda_backend.cc): CudaStreams running the CUDA
// kernels. Defined only in builds with the CUDA backend; an error when no GPU is usable (why, from
// probe_cuda()) or the index is not a visible device. REQUIRES: its streams and events are
// destroyed before it.
StatusOr<std::unique_ptr<Backend>> make_cuda_backend(int device_index);

// The backend for `device`: the CPU one, or the CUDA one (on options.cuda_device) when it is built
// and a GPU is present; otherwise an error saying which of the two is missing.
StatusOr<std::unique_ptr<Backend>> make_backend(Device device, StreamOptions options = {});

// What the model, the parameter coordinator, the gradient reducer and the optimizer-state store are
// handed explicitly: the backend, and the two streams of one rank (compute: the model's kernels and
// the ops around them; comm: collectives and the work queued after them).
class ExecutionContext {
 public:
  static StatusOr<std::unique_ptr<ExecutionContext>> create(Device device,
                                                            StreamOptions options = {});
  // The host engine's context: the CPU backend with its compute stream inline (the caller's own
  // thread runs its ops: the work is the caller's, a hand-off per op would only add latency) and
  // its comm stream a worker thread, so the work queued behind a collective (waiting for it,
  // accumulating its result) runs beside the caller's next work, as overlap_comm asks.
  static std::unique_ptr<ExecutionContext> create_host();

  Backend& backend() const { return *backend_; }
  Stream& compute() const { return *compute_; }
  Stream& comm() const { return *comm_; }
  Device device() const { return backend_->device(); }

 private:
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Stream> compute_;
  std::unique_ptr<Stream> comm_;
};

}  // namespace zero::device
