// Tests for the CPU SwiGLU: forward against silu(gate) * up, fp64 finite-difference gradients,
// accumulation and float-vs-double agreement over odd sizes.
#include "kernels/swiglu/swiglu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/grad_check.h"

namespace zero::kernels::cpu {
namespace {

using testing::dot;
using testing::max_rel_error;
using testing::numeric_grad;
using testing::random_vector;
using testing::to_float;

class SwigluTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(SwigluTest, ForwardMatchesFormula) {
  const int64_t n = GetParam();
  auto gate = random_vector(n, 1, -6.0, 6.0), up = random_vector(n, 2);
  std::vector<double> out(n);
  swiglu_forward(out.data(), gate.data(), up.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(out[i], gate[i] / (1.0 + std::exp(-gate[i])) * up[i], 1e-15);
  }
}

TEST_P(SwigluTest, BackwardMatchesFiniteDifferences) {
  const int64_t n = GetParam();
  auto gate = random_vector(n, 3, -6.0, 6.0), up = random_vector(n, 4), w = random_vector(n, 5);
  std::vector<double> out(n);
  auto loss = [&] {
    swiglu_forward(out.data(), gate.data(), up.data(), n);
    return dot(w, out.data(), out.size());
  };
  std::vector<double> dgate(n), dup(n);
  swiglu_backward(dgate.data(), dup.data(), w.data(), gate.data(), up.data(), n);
  EXPECT_LT(max_rel_error(dgate, numeric_grad(gate, loss)), 1e-6);
  EXPECT_LT(max_rel_error(dup, numeric_grad(up, loss)), 1e-6);
}

TEST_P(SwigluTest, BackwardAccumulates) {
  const int64_t n = GetParam();
  auto gate = random_vector(n, 6, -6.0, 6.0), up = random_vector(n, 7), dout = random_vector(n, 8);
  std::vector<double> g_gate(n), g_up(n);
  swiglu_backward(g_gate.data(), g_up.data(), dout.data(), gate.data(), up.data(), n);
  auto dgate = random_vector(n, 9), dup = random_vector(n, 10);
  const auto dgate0 = dgate, dup0 = dup;
  for (int call = 0; call < 2; ++call) {
    swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n);
  }
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(dgate[i], dgate0[i] + 2 * g_gate[i], 1e-14);
    EXPECT_NEAR(dup[i], dup0[i] + 2 * g_up[i], 1e-14);
  }
}

TEST_P(SwigluTest, FloatMatchesDouble) {
  const int64_t n = GetParam();
  auto gate = random_vector(n, 11, -6.0, 6.0), up = random_vector(n, 12),
       dout = random_vector(n, 13);
  std::vector<double> out(n), dgate(n), dup(n);
  swiglu_forward(out.data(), gate.data(), up.data(), n);
  swiglu_backward(dgate.data(), dup.data(), dout.data(), gate.data(), up.data(), n);
  auto gate_f = to_float(gate), up_f = to_float(up), dout_f = to_float(dout);
  std::vector<float> out_f(n), dgate_f(n), dup_f(n);
  swiglu_forward(out_f.data(), gate_f.data(), up_f.data(), n);
  swiglu_backward(dgate_f.data(), dup_f.data(), dout_f.data(), gate_f.data(), up_f.data(), n);
  auto as_double = [](const std::vector<float>& v) {
    return std::vector<double>(v.begin(), v.end());
  };
  EXPECT_LT(max_rel_error(as_double(out_f), out), 1e-6);
  EXPECT_LT(max_rel_error(as_double(dgate_f), dgate), 1e-6);
  EXPECT_LT(max_rel_error(as_double(dup_f), dup), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(OddSizes, SwigluTest, ::testing::Values(1, 7, 13, 91, 1031),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

}  // namespace
}  // namespace zero::kernels::cpu
