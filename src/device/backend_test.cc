// The CPU backend's ops against plain loops (core/dtype.h conversions, optim::adam_update), run on
// streams in delay mode, across dtypes and odd sizes; a produce → reduce → consume chain across the
// compute and comm streams ordered by events only.
#include "device/backend.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace zero::device {
namespace {

constexpr StreamOptions kDelays{.max_delay_us = 200, .delay_seed = 5};

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

TensorView view(void* data, DType dtype, int64_t n) {
  return TensorView{data, dtype, Shape{n}, Device::kCpu};
}

class BackendOps : public ::testing::TestWithParam<int64_t> {};

TEST_P(BackendOps, CopyCastsExactlyAsCoreDtype) {
  const int64_t n = GetParam();
  auto ctx = ExecutionContext::create(Device::kCpu, kDelays);
  ASSERT_TRUE(ctx.ok());
  Backend& be = (*ctx)->backend();
  Stream& s = (*ctx)->compute();
  const std::vector<float> src = random_floats(n, 1);
  for (DType d : {DType::kBF16, DType::kF16}) {
    std::vector<uint16_t> got(static_cast<size_t>(n)), want(static_cast<size_t>(n));
    std::vector<uint16_t> other(static_cast<size_t>(n)), other_want(static_cast<size_t>(n));
    std::vector<float> back(static_cast<size_t>(n)), back_want(static_cast<size_t>(n));
    const DType o = d == DType::kBF16 ? DType::kF16 : DType::kBF16;
    be.copy(s, view(got.data(), d, n), view(const_cast<float*>(src.data()), DType::kF32, n));
    be.copy(s, view(back.data(), DType::kF32, n), view(got.data(), d, n));
    be.copy(s, view(other.data(), o, n), view(got.data(), d, n));
    ASSERT_TRUE(s.synchronize().ok());
    convert_from_f32(src.data(), want.data(), d, static_cast<size_t>(n));
    convert_to_f32(want.data(), d, back_want.data(), static_cast<size_t>(n));
    convert_from_f32(back_want.data(), other_want.data(), o, static_cast<size_t>(n));
    EXPECT_EQ(got, want);
    EXPECT_EQ(back, back_want);
    EXPECT_EQ(other, other_want);
  }
}

TEST_P(BackendOps, AccumulateScaleAndSumSquaresMatchPlainLoops) {
  const int64_t n = GetParam();
  auto ctx = ExecutionContext::create(Device::kCpu, kDelays);
  ASSERT_TRUE(ctx.ok());
  Backend& be = (*ctx)->backend();
  Stream& s = (*ctx)->compute();
  std::vector<float> acc = random_floats(n, 2), want = acc;
  const std::vector<float> x = random_floats(n, 3);
  std::vector<uint16_t> x16(static_cast<size_t>(n));
  convert_from_f32(x.data(), x16.data(), DType::kBF16, static_cast<size_t>(n));
  be.accumulate(s, view(acc.data(), DType::kF32, n),
                view(const_cast<float*>(x.data()), DType::kF32, n));
  be.accumulate(s, view(acc.data(), DType::kF32, n), view(x16.data(), DType::kBF16, n));
  be.scale(s, view(acc.data(), DType::kF32, n), 0.5f);
  SumSquaresOut sq;
  be.sum_squares(s, view(acc.data(), DType::kF32, n), &sq);
  ASSERT_TRUE(s.synchronize().ok());
  double want_sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    float a = want[k];
    a += x[k];
    a += bf16_to_float(bf16{x16[k]});
    a *= 0.5f;
    want[k] = a;
    want_sq += static_cast<double>(a) * a;
  }
  EXPECT_EQ(acc, want);
  EXPECT_NEAR(sq.sum_sq, want_sq, 1e-9 * std::max(1.0, want_sq));
  EXPECT_FALSE(sq.nonfinite);

  // A non-finite value anywhere (here in a 16-bit input, past the first conversion chunk) sets
  // the flag.
  x16[static_cast<size_t>(n - 1)] = 0x7fc0;  // bf16 NaN
  SumSquaresOut flagged;
  be.sum_squares(s, view(x16.data(), DType::kBF16, n), &flagged);
  ASSERT_TRUE(s.synchronize().ok());
  EXPECT_TRUE(flagged.nonfinite);
}

TEST_P(BackendOps, AdamwMatchesTheOptimizer) {
  const int64_t n = GetParam();
  auto ctx = ExecutionContext::create(Device::kCpu, kDelays);
  ASSERT_TRUE(ctx.ok());
  std::vector<float> p = random_floats(n, 4), g = random_floats(n, 5);
  std::vector<float> m(static_cast<size_t>(n), 0.1f), v(static_cast<size_t>(n), 0.2f);
  std::vector<float> p2 = p, m2 = m, v2 = v;
  std::vector<uint16_t> p16(static_cast<size_t>(n)), p16_want(static_cast<size_t>(n));
  optim::AdamArgs args;
  args.lr = 1e-2f;
  args.weight_decay = 0.1f;
  args.step = 3;
  AdamShardViews shard{view(p.data(), DType::kF32, n), view(g.data(), DType::kF32, n),
                       view(m.data(), DType::kF32, n), view(v.data(), DType::kF32, n),
                       view(p16.data(), DType::kBF16, n)};
  (*ctx)->backend().adamw((*ctx)->compute(), args, shard, 0.25f);
  ASSERT_TRUE((*ctx)->compute().synchronize().ok());
  optim::AdamShard direct{p2.data(), g.data(),        m2.data(),   v2.data(),
                          n,         p16_want.data(), DType::kBF16};
  optim::adam_update(args, direct, 0.25f);
  EXPECT_EQ(p, p2);
  EXPECT_EQ(m, m2);
  EXPECT_EQ(v, v2);
  EXPECT_EQ(p16, p16_want);
}

// 1, a prime, and sizes across the 16 Ki-element conversion chunk.
INSTANTIATE_TEST_SUITE_P(Sizes, BackendOps, ::testing::Values(1, 97, 16384, 16385, 40009));

// The step's shape in miniature: compute produces a 16-bit gradient and records; comm waits on it,
// widens it into an fp32 accumulator and computes the norm; compute waits on comm before reusing
// the gradient buffer. Events only; the host waits once at the end (the grad-norm scalar).
TEST(ExecutionContext, ComputeAndCommChainOrderedByEventsOnly) {
  auto ctx = ExecutionContext::create(Device::kCpu, kDelays);
  ASSERT_TRUE(ctx.ok());
  Backend& be = (*ctx)->backend();
  Stream& compute = (*ctx)->compute();
  Stream& comm = (*ctx)->comm();
  constexpr int64_t n = 1000;
  constexpr int kMicroSteps = 8;
  std::vector<float> staging(n);
  std::vector<uint16_t> grad16(n);
  std::vector<float> acc(n, 0.0f);
  auto produced = be.create_event();
  auto consumed = be.create_event();
  std::vector<float> want(n, 0.0f);
  for (int k = 0; k < kMicroSteps; ++k) {
    const std::vector<float> g = random_floats(n, 100 + static_cast<uint32_t>(k));
    compute.wait(*consumed);  // the gradient buffer is free again
    be.copy(compute, view(staging.data(), DType::kF32, n),
            view(const_cast<float*>(g.data()), DType::kF32, n));
    be.copy(compute, view(grad16.data(), DType::kBF16, n), view(staging.data(), DType::kF32, n));
    compute.record(*produced);
    comm.wait(*produced);
    be.accumulate(comm, view(acc.data(), DType::kF32, n), view(grad16.data(), DType::kBF16, n));
    comm.record(*consumed);
    ASSERT_TRUE(compute.synchronize().ok());  // keeps `g` alive until its copy ran (test only)
    for (int64_t i = 0; i < n; ++i) {
      want[static_cast<size_t>(i)] += round_to_bf16(g[static_cast<size_t>(i)]);
    }
  }
  SumSquaresOut norm;
  be.sum_squares(comm, view(acc.data(), DType::kF32, n), &norm);
  // Host wait: the grad-norm scalar is needed on the host (clipping, logging).
  ASSERT_TRUE(comm.synchronize().ok());
  EXPECT_EQ(acc, want);
  double want_sq = 0;
  for (float a : want) want_sq += static_cast<double>(a) * a;
  EXPECT_NEAR(norm.sum_sq, want_sq, 1e-9 * want_sq);
}

TEST(Backend, DispatchIsByDevice) {
  auto cpu = make_backend(Device::kCpu);
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)->device(), Device::kCpu);
  auto cuda = make_backend(Device::kCuda);
  EXPECT_FALSE(cuda.ok());
}

}  // namespace
}  // namespace zero::device
