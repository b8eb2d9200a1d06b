// The Backend contract as tests, run against every backend (ggml's one harness for all backends):
// backend_test.cc instantiates them on the CPU backend, cuda_backend_test.cc on the CUDA one (a
// GPU, or the CPU emulator: src/emu/cuda_backend_emu_test.cc). Each op is checked against plain
// loops (core/dtype.h conversions, optim::adam_update), so every backend is bitwise the CPU one
// where the contract says so (zero, copy / cast, accumulate, scale, adamw) and within fp tolerance
// for the sum of squares (its summation order is the backend's). Included by one test file per
// binary.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/check.h"
#include "device/backend.h"

namespace zero::device::testing {

// How the tests reach one backend's memory and streams.
struct BackendUnderTest {
  const char* name;
  Device device;
  // GTEST_SKIPs (from SetUp) when the backend cannot run here.
  void (*skip_if_unavailable)();
  void* (*alloc)(size_t nbytes);
  void (*free)(void* data);
  // Complete on return. download REQUIRES: the work writing `src` has been synchronized.
  void (*upload)(void* dst, const void* src_host, size_t nbytes);
  void (*download)(void* dst_host, const void* src, size_t nbytes);
  // Queues fn on `stream` as a host function, in stream order (the tests hold a stream with it).
  void (*run_on_stream)(Stream& stream, std::function<void()> fn);
};

// One buffer in the backend's memory: `numel` elements of `dtype`.
class DeviceBuffer {
 public:
  DeviceBuffer(const BackendUnderTest& be, DType dtype, int64_t numel)
      : be_(be), dtype_(dtype), numel_(numel), data_(be.alloc(bytes())) {}
  ~DeviceBuffer() { be_.free(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  TensorView view() const { return TensorView{data_, dtype_, Shape{numel_}, be_.device}; }
  template <typename T>
  void upload(const std::vector<T>& host) {
    ZERO_CHECK(host.size() * sizeof(T) == bytes(), "upload of ", host.size() * sizeof(T), " bytes");
    be_.upload(data_, host.data(), bytes());
  }
  template <typename T>
  std::vector<T> download() const {
    std::vector<T> host(bytes() / sizeof(T));
    be_.download(host.data(), data_, bytes());
    return host;
  }

 private:
  size_t bytes() const { return static_cast<size_t>(numel_) * dtype_bytes(dtype_); }
  const BackendUnderTest& be_;
  DType dtype_;
  int64_t numel_;
  void* data_;
};

// A host function that holds a stream until open() (forces an interleaving of two streams).
class Gate {
 public:
  void hold(const BackendUnderTest& be, Stream& stream) {
    be.run_on_stream(stream, [this] {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return open_; });
    });
  }
  void open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

inline constexpr StreamOptions kDelays{.max_delay_us = 200, .delay_seed = 5};

inline std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

inline std::vector<uint16_t> to_16bit(const std::vector<float>& v, DType dtype) {
  std::vector<uint16_t> out(v.size());
  convert_from_f32(v.data(), out.data(), dtype, v.size());
  return out;
}

inline double sum_squares_of(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return s;
}

// The sum of squares' tolerance: each square is exact in fp64, only the summation order differs.
inline double sum_sq_tolerance(double want) { return 1e-9 * std::max(1.0, want); }

using BackendParam = std::tuple<const BackendUnderTest*, int64_t>;  // backend, numel

class BackendContext : public ::testing::TestWithParam<BackendParam> {
 protected:
  void SetUp() override {
    be().skip_if_unavailable();
    if (IsSkipped()) return;
    auto ctx = ExecutionContext::create(be().device, kDelays);
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    ctx_ = std::move(*ctx);
  }
  const BackendUnderTest& be() const { return *std::get<0>(GetParam()); }
  int64_t numel() const { return std::get<1>(GetParam()); }
  Backend& backend() const { return ctx_->backend(); }
  Stream& compute() const { return ctx_->compute(); }
  Stream& comm() const { return ctx_->comm(); }
  DeviceBuffer buffer(DType dtype, int64_t n) const { return DeviceBuffer(be(), dtype, n); }

  std::unique_ptr<ExecutionContext> ctx_;
};

inline std::string param_name(const ::testing::TestParamInfo<BackendParam>& info) {
  return std::string(std::get<0>(info.param)->name) + "_" + std::to_string(std::get<1>(info.param));
}

using BackendOps = BackendContext;

TEST_P(BackendOps, ZeroClearsEveryDtype) {
  const int64_t n = numel();
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    DeviceBuffer buf = buffer(d, n);
    std::vector<uint8_t> garbage(static_cast<size_t>(n) * dtype_bytes(d), 0xA5);
    buf.upload(garbage);
    backend().zero(compute(), buf.view());
    ASSERT_TRUE(compute().synchronize().ok());
    EXPECT_EQ(buf.download<uint8_t>(), std::vector<uint8_t>(garbage.size(), 0));
  }
}

// The backend's own memory and host <-> device copies (what device staging runs on): a host
// buffer through allocate / transfer to the device, within the device, and back, in stream order.
TEST_P(BackendOps, AllocateAndTransferRoundTripInStreamOrder) {
  const int64_t n = numel();
  for (DType d : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(d));
    std::vector<float> v = random_floats(n, 11);
    std::vector<uint16_t> v16 = to_16bit(v, DType::kBF16);
    const void* src = d == DType::kF32 ? static_cast<const void*>(v.data()) : v16.data();
    const size_t bytes = static_cast<size_t>(n) * dtype_bytes(d);
    auto a = backend().allocate(d, n);
    auto b = backend().allocate(d, n);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->view().device, be().device);
    std::vector<std::byte> back(bytes);
    const TensorView host_in{const_cast<void*>(src), d, Shape{n}, Device::kCpu};
    const TensorView host_out{back.data(), d, Shape{n}, Device::kCpu};
    backend().transfer(compute(), a->view(), host_in);
    backend().transfer(compute(), b->view(), a->view());
    backend().transfer(compute(), host_out, b->view());
    ASSERT_TRUE(compute().synchronize().ok());
    EXPECT_EQ(std::memcmp(back.data(), src, bytes), 0);
  }
}

// Host memory for asynchronous copies (the offload pipeline's slots): allocate_host gives host
// memory of the asked size, and a round trip through the device on a copy stream of its own,
// ordered against the compute stream by events only, returns the bytes.
TEST_P(BackendOps, AllocateHostSlotsRoundTripOnACopyStream) {
  const int64_t n = numel();
  std::vector<float> v = random_floats(n, 23);
  auto up = backend().allocate_host(DType::kF32, n);
  auto down = backend().allocate_host(DType::kF32, n);
  auto dev = backend().allocate(DType::kF32, n);
  ASSERT_TRUE(up.ok() && down.ok() && dev.ok());
  EXPECT_EQ(up->view().device, Device::kCpu);
  EXPECT_EQ(up->numel(), n);
  std::memcpy(up->data(), v.data(), static_cast<size_t>(n) * sizeof(float));
  std::unique_ptr<Stream> copy = backend().create_stream("copy");
  std::unique_ptr<Event> uploaded = backend().create_event(), scaled = backend().create_event();
  backend().transfer(*copy, dev->view(), up->view());
  copy->record(*uploaded);
  compute().wait(*uploaded);
  backend().scale(compute(), dev->view(), 2.0f);
  compute().record(*scaled);
  copy->wait(*scaled);
  backend().transfer(*copy, down->view(), dev->view());
  ASSERT_TRUE(copy->synchronize().ok());
  ASSERT_TRUE(compute().synchronize().ok());
  const float* got = static_cast<const float*>(down->data());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 2.0f * v[static_cast<size_t>(i)]) << i;
}

TEST_P(BackendOps, CopyCastsExactlyAsCoreDtype) {
  const int64_t n = numel();
  Stream& s = compute();
  const std::vector<float> src = random_floats(n, 1);
  DeviceBuffer src_dev = buffer(DType::kF32, n), copy_dev = buffer(DType::kF32, n);
  DeviceBuffer back_dev = buffer(DType::kF32, n);
  src_dev.upload(src);
  backend().copy(s, copy_dev.view(), src_dev.view());  // same dtype: a plain copy
  for (DType d : {DType::kBF16, DType::kF16}) {
    const DType o = d == DType::kBF16 ? DType::kF16 : DType::kBF16;
    DeviceBuffer got_dev = buffer(d, n), other_dev = buffer(o, n);
    backend().copy(s, got_dev.view(), src_dev.view());
    backend().copy(s, back_dev.view(), got_dev.view());
    backend().copy(s, other_dev.view(), got_dev.view());
    ASSERT_TRUE(s.synchronize().ok());
    std::vector<uint16_t> want(static_cast<size_t>(n)), other_want(static_cast<size_t>(n));
    std::vector<float> back_want(static_cast<size_t>(n));
    convert_from_f32(src.data(), want.data(), d, static_cast<size_t>(n));
    convert_to_f32(want.data(), d, back_want.data(), static_cast<size_t>(n));
    convert_from_f32(back_want.data(), other_want.data(), o, static_cast<size_t>(n));
    EXPECT_EQ(got_dev.download<uint16_t>(), want);
    EXPECT_EQ(back_dev.download<float>(), back_want);
    EXPECT_EQ(other_dev.download<uint16_t>(), other_want);
  }
  EXPECT_EQ(copy_dev.download<float>(), src);
}

TEST_P(BackendOps, AccumulateScaleAndSumSquaresMatchPlainLoops) {
  const int64_t n = numel();
  Stream& s = compute();
  std::vector<float> want = random_floats(n, 2);
  const std::vector<float> x = random_floats(n, 3);
  const std::vector<uint16_t> x16 = to_16bit(x, DType::kBF16);
  const std::vector<uint16_t> xh = to_16bit(random_floats(n, 4), DType::kF16);
  DeviceBuffer acc = buffer(DType::kF32, n), x_dev = buffer(DType::kF32, n);
  DeviceBuffer x16_dev = buffer(DType::kBF16, n), xh_dev = buffer(DType::kF16, n);
  acc.upload(want);
  x_dev.upload(x);
  x16_dev.upload(x16);
  xh_dev.upload(xh);
  backend().accumulate(s, acc.view(), x_dev.view());
  backend().accumulate(s, acc.view(), x16_dev.view());
  backend().accumulate(s, acc.view(), xh_dev.view());
  backend().scale(s, acc.view(), 0.5f);
  SumSquaresOut sq;
  backend().sum_squares(s, acc.view(), &sq);
  ASSERT_TRUE(s.synchronize().ok());
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    float a = want[k];
    a += x[k];
    a += bf16_to_float(bf16{x16[k]});
    a += f16_to_float(f16{xh[k]});
    a *= 0.5f;
    want[k] = a;
  }
  EXPECT_EQ(acc.download<float>(), want);
  const double want_sq = sum_squares_of(want);
  EXPECT_NEAR(sq.sum_sq, want_sq, sum_sq_tolerance(want_sq));
  EXPECT_FALSE(sq.nonfinite);

  // A non-finite value anywhere (here the last element of a 16-bit input, past the CPU backend's
  // first conversion chunk) sets the flag.
  std::vector<uint16_t> flagged16 = x16;
  flagged16.back() = 0x7fc0;  // bf16 NaN
  x16_dev.upload(flagged16);
  SumSquaresOut flagged;
  backend().sum_squares(s, x16_dev.view(), &flagged);
  ASSERT_TRUE(s.synchronize().ok());
  EXPECT_TRUE(flagged.nonfinite);
}

// accumulate_rounded and round_to are bitwise the two-op sequences they fuse (copy into the
// 16-bit dtype, then accumulate / copy back), NaNs and values past the 16-bit range included.
TEST_P(BackendOps, AccumulateRoundedAndRoundToAreTheCastThenTheOp) {
  const int64_t n = numel();
  Stream& s = compute();
  std::vector<float> x = random_floats(n, 5);
  x[0] = std::numeric_limits<float>::quiet_NaN();
  if (n > 1) x[1] = 1e30f;  // past f16's range: inf after rounding
  const std::vector<float> acc0 = random_floats(n, 6);
  for (DType d : {DType::kBF16, DType::kF16}) {
    DeviceBuffer acc = buffer(DType::kF32, n), x_dev = buffer(DType::kF32, n);
    acc.upload(acc0);
    x_dev.upload(x);
    backend().accumulate_rounded(s, acc.view(), x_dev.view(), d);
    backend().round_to(s, x_dev.view(), d);
    ASSERT_TRUE(s.synchronize().ok());
    std::vector<float> rounded(static_cast<size_t>(n)), want = acc0;
    const std::vector<uint16_t> x16 = to_16bit(x, d);
    convert_to_f32(x16.data(), d, rounded.data(), static_cast<size_t>(n));
    for (size_t k = 0; k < want.size(); ++k) want[k] += rounded[k];
    const std::vector<float> got_acc = acc.download<float>(), got_x = x_dev.download<float>();
    EXPECT_EQ(std::memcmp(got_acc.data(), want.data(), want.size() * 4), 0) << dtype_name(d);
    EXPECT_EQ(std::memcmp(got_x.data(), rounded.data(), rounded.size() * 4), 0) << dtype_name(d);
  }
}

// Several sums of squares queued before one synchronize on both streams at once, two into the
// same output: each adds its own total once (the CUDA backend's per-op totals; the streams'
// delays interleave the two streams' ops differently in every round).
TEST_P(BackendOps, SumSquaresQueuedBeforeOneSynchronizeEachAddOnce) {
  const int64_t n = numel();
  std::vector<double> want_sq;
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  for (uint32_t k = 0; k < 4; ++k) {
    const std::vector<float> x = random_floats(n, 10 + k);
    want_sq.push_back(sum_squares_of(x));
    bufs.push_back(std::make_unique<DeviceBuffer>(be(), DType::kF32, n));
    bufs.back()->upload(x);
  }
  for (int round = 0; round < 4; ++round) {  // later rounds reuse what earlier ones released
    SCOPED_TRACE("round " + std::to_string(round));
    SumSquaresOut a, b, c;
    backend().sum_squares(compute(), bufs[0]->view(), &a);
    backend().sum_squares(comm(), bufs[3]->view(), &c);
    backend().sum_squares(compute(), bufs[1]->view(), &b);
    backend().sum_squares(comm(), bufs[0]->view(), &c);
    backend().sum_squares(compute(), bufs[2]->view(), &a);
    backend().sum_squares(comm(), bufs[1]->view(), &c);
    ASSERT_TRUE(compute().synchronize().ok());
    ASSERT_TRUE(comm().synchronize().ok());
    const double want_a = want_sq[0] + want_sq[2];
    const double want_c = want_sq[3] + want_sq[0] + want_sq[1];
    EXPECT_NEAR(a.sum_sq, want_a, sum_sq_tolerance(want_a));
    EXPECT_NEAR(b.sum_sq, want_sq[1], sum_sq_tolerance(want_sq[1]));
    EXPECT_NEAR(c.sum_sq, want_c, sum_sq_tolerance(want_c));
    EXPECT_FALSE(a.nonfinite || b.nonfinite || c.nonfinite);
  }
}

TEST_P(BackendOps, AdamwMatchesTheOptimizer) {
  const int64_t n = numel();
  std::vector<float> p = random_floats(n, 4), g = random_floats(n, 5);
  std::vector<float> m(static_cast<size_t>(n), 0.1f), v(static_cast<size_t>(n), 0.2f);
  std::vector<float> p2 = p, m2 = m, v2 = v;
  std::vector<uint16_t> p16_want(static_cast<size_t>(n));
  optim::AdamArgs args;
  args.lr = 1e-2f;
  args.weight_decay = 0.1f;
  args.step = 3;
  DeviceBuffer p_dev = buffer(DType::kF32, n), g_dev = buffer(DType::kF32, n);
  DeviceBuffer m_dev = buffer(DType::kF32, n), v_dev = buffer(DType::kF32, n);
  DeviceBuffer p16_dev = buffer(DType::kBF16, n);
  p_dev.upload(p);
  g_dev.upload(g);
  m_dev.upload(m);
  v_dev.upload(v);
  AdamShardViews shard{};
  shard.param = p_dev.view();
  shard.grad = g_dev.view();
  shard.exp_avg = m_dev.view();
  shard.exp_avg_sq = v_dev.view();
  shard.param_16bit = p16_dev.view();
  backend().adamw(compute(), args, shard, 0.25f);
  ASSERT_TRUE(compute().synchronize().ok());
  optim::AdamShard direct{p2.data(), g.data(),        m2.data(),   v2.data(),
                          n,         p16_want.data(), DType::kBF16};
  optim::adam_update(args, direct, 0.25f);
  EXPECT_EQ(p_dev.download<float>(), p2);
  EXPECT_EQ(m_dev.download<float>(), m2);
  EXPECT_EQ(v_dev.download<float>(), v2);
  EXPECT_EQ(p16_dev.download<uint16_t>(), p16_want);
}

// A bf16 state (bf16 master weights and moments; bf16 master with fp32 moments): the views' dtypes
// pick the kernel's bf16 pointers, bitwise the optimizer's update of the same shard.
TEST_P(BackendOps, AdamwOnABf16StateMatchesTheOptimizer) {
  const int64_t n = numel();
  for (const DType moments : {DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(dtype_name(moments));
    std::vector<float> g = random_floats(n, 5), pf = random_floats(n, 4);
    std::vector<uint16_t> p(static_cast<size_t>(n)), m16(p.size()), v16(p.size());
    std::vector<float> m32(p.size(), 0.1f), v32(p.size(), 0.2f);
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] = float_to_bf16(pf[i]).bits;
      m16[i] = float_to_bf16(0.1f).bits;
      v16[i] = float_to_bf16(0.2f).bits;
    }
    optim::AdamArgs args;
    args.lr = 1e-2f;
    args.weight_decay = 0.1f;
    args.step = 3;
    DeviceBuffer p_dev = buffer(DType::kBF16, n), g_dev = buffer(DType::kF32, n);
    DeviceBuffer m_dev = buffer(moments, n), v_dev = buffer(moments, n);
    DeviceBuffer p16_dev = buffer(DType::kBF16, n);
    p_dev.upload(p);
    g_dev.upload(g);
    if (moments == DType::kBF16) {
      m_dev.upload(m16);
      v_dev.upload(v16);
    } else {
      m_dev.upload(m32);
      v_dev.upload(v32);
    }
    AdamShardViews shard;
    shard.param = p_dev.view();
    shard.grad = g_dev.view();
    shard.exp_avg = m_dev.view();
    shard.exp_avg_sq = v_dev.view();
    shard.param_16bit = p16_dev.view();
    backend().adamw(compute(), args, shard, 0.25f);
    ASSERT_TRUE(compute().synchronize().ok());
    optim::AdamShard direct;
    direct.param_bf16 = reinterpret_cast<bf16*>(p.data());
    direct.grad = g.data();
    if (moments == DType::kBF16) {
      direct.exp_avg_bf16 = reinterpret_cast<bf16*>(m16.data());
      direct.exp_avg_sq_bf16 = reinterpret_cast<bf16*>(v16.data());
    } else {
      direct.exp_avg = m32.data();
      direct.exp_avg_sq = v32.data();
    }
    direct.numel = n;
    optim::adam_update(args, direct, 0.25f);
    EXPECT_EQ(p_dev.download<uint16_t>(), p);
    EXPECT_EQ(p16_dev.download<uint16_t>(), p);  // the copy of a bf16 master is the master
    if (moments == DType::kBF16) {
      EXPECT_EQ(m_dev.download<uint16_t>(), m16);
      EXPECT_EQ(v_dev.download<uint16_t>(), v16);
    } else {
      EXPECT_EQ(m_dev.download<float>(), m32);
      EXPECT_EQ(v_dev.download<float>(), v32);
    }
  }
}

using BackendStreams = BackendContext;

// An event never recorded is complete; a record behind held work is not, until the work ran.
TEST_P(BackendStreams, EventQueryAndSynchronizeFollowTheRecord) {
  auto event = backend().create_event();
  EXPECT_TRUE(event->query());
  event->synchronize();  // returns at once
  Gate gate;
  gate.hold(be(), compute());
  compute().record(*event);
  EXPECT_FALSE(event->query());
  gate.open();
  event->synchronize();
  EXPECT_TRUE(event->query());
  ASSERT_TRUE(compute().synchronize().ok());
}

// Stream A produces a buffer behind held work; stream B copies it out. Without the event wait B
// reads the stale buffer (B finishes while A is still held: the interleaving is forced); with
// record on A and wait on B, B reads what A produced, with no host wait in between.
TEST_P(BackendStreams, ConsumerOnAnotherStreamNeedsTheEventWait) {
  const int64_t n = numel();
  const std::vector<float> old_values = random_floats(n, 20), new_values = random_floats(n, 21);
  for (const bool with_wait : {false, true}) {
    SCOPED_TRACE(with_wait ? "with the wait" : "without the wait");
    DeviceBuffer buf = buffer(DType::kF32, n), fresh = buffer(DType::kF32, n);
    DeviceBuffer out = buffer(DType::kF32, n);
    buf.upload(old_values);
    fresh.upload(new_values);
    auto produced = backend().create_event();
    Gate gate;
    gate.hold(be(), compute());
    backend().copy(compute(), buf.view(), fresh.view());
    if (with_wait) {
      compute().record(*produced);
      comm().wait(*produced);
    }
    backend().copy(comm(), out.view(), buf.view());
    // Without the wait, comm's copy does not depend on compute: it runs while compute is held.
    if (!with_wait) {
      ASSERT_TRUE(comm().synchronize().ok());
    }
    gate.open();
    ASSERT_TRUE(compute().synchronize().ok());
    ASSERT_TRUE(comm().synchronize().ok());
    EXPECT_EQ(out.download<float>(), with_wait ? new_values : old_values);
  }
}

// The step's shape in miniature: compute produces a 16-bit gradient and records; comm waits on it,
// widens it into an fp32 accumulator and computes the norm; compute waits on comm before reusing
// the gradient buffer. Events only; the host waits once at the end (the grad-norm scalar), and per
// micro-step only for the test's own upload of the next input.
TEST_P(BackendStreams, ComputeAndCommChainOrderedByEventsOnly) {
  const int64_t n = numel();
  constexpr int kMicroSteps = 8;
  DeviceBuffer input = buffer(DType::kF32, n), staging = buffer(DType::kF32, n);
  DeviceBuffer grad16 = buffer(DType::kBF16, n), acc = buffer(DType::kF32, n);
  backend().zero(comm(), acc.view());
  auto produced = backend().create_event();
  auto consumed = backend().create_event();
  std::vector<float> want(static_cast<size_t>(n), 0.0f);
  for (int k = 0; k < kMicroSteps; ++k) {
    const std::vector<float> g = random_floats(n, 100 + static_cast<uint32_t>(k));
    input.upload(g);
    compute().wait(*consumed);  // the gradient buffer is free again
    backend().copy(compute(), staging.view(), input.view());
    backend().copy(compute(), grad16.view(), staging.view());
    compute().record(*produced);
    comm().wait(*produced);
    backend().accumulate(comm(), acc.view(), grad16.view());
    comm().record(*consumed);
    ASSERT_TRUE(compute().synchronize().ok());  // `input` is re-uploaded next (test only)
    for (size_t i = 0; i < want.size(); ++i) want[i] += round_to_bf16(g[i]);
  }
  SumSquaresOut norm;
  backend().sum_squares(comm(), acc.view(), &norm);
  // Host wait: the grad-norm scalar is needed on the host (clipping, logging).
  ASSERT_TRUE(comm().synchronize().ok());
  EXPECT_EQ(acc.download<float>(), want);
  const double want_sq = sum_squares_of(want);
  EXPECT_NEAR(norm.sum_sq, want_sq, sum_sq_tolerance(want_sq));
}

// 1, a prime, and sizes across the CPU backend's 16 Ki-element conversion chunk.
inline auto op_sizes() { return ::testing::Values<int64_t>(1, 97, 16384, 16385, 40009); }
inline auto stream_sizes() { return ::testing::Values<int64_t>(1, 1000); }

}  // namespace zero::device::testing
