// Tests for the CPU GELU (tanh approximation, HF "gelu_new"): reference values, fp64
// finite-difference gradient, accumulation and float-vs-double agreement over odd sizes.
#include "kernels/gelu/gelu.h"

#include <gtest/gtest.h>

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

TEST(GeluTest, MatchesFormulaAtKnownPoints) {
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³))), evaluated independently in fp64.
  const std::vector<double> x = {-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0};
  const std::vector<double> want = {
      -0.0036373920817729943, -0.15880800939172324, -0.15428599017485606, 0.0,
      0.34571400982514394,    0.8411919906082768,   2.996362607918227};
  std::vector<double> out(x.size());
  gelu_forward(out.data(), x.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-15) << "x " << x[i];
  std::vector<float> x_f = to_float(x), out_f(x.size());
  gelu_forward(out_f.data(), x_f.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(out_f[i], want[i], 1e-6) << "x " << x[i];
}

class GeluSizeTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(GeluSizeTest, BackwardMatchesFiniteDifferences) {
  const int64_t n = GetParam();
  auto inp = random_vector(n, 1, -4.0, 4.0), w = random_vector(n, 2);
  std::vector<double> out(n);
  auto loss = [&] {
    gelu_forward(out.data(), inp.data(), n);
    return dot(w, out.data(), out.size());
  };
  std::vector<double> dinp(n);
  gelu_backward(dinp.data(), inp.data(), w.data(), n);
  EXPECT_LT(max_rel_error(dinp, numeric_grad(inp, loss)), 1e-6);
}

TEST_P(GeluSizeTest, BackwardAccumulates) {
  const int64_t n = GetParam();
  auto inp = random_vector(n, 3, -4.0, 4.0), dout = random_vector(n, 4);
  std::vector<double> g(n);
  gelu_backward(g.data(), inp.data(), dout.data(), n);
  auto dinp = random_vector(n, 5);
  const auto dinp0 = dinp;
  gelu_backward(dinp.data(), inp.data(), dout.data(), n);
  gelu_backward(dinp.data(), inp.data(), dout.data(), n);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(dinp[i], dinp0[i] + 2 * g[i], 1e-14);
}

TEST_P(GeluSizeTest, FloatMatchesDouble) {
  const int64_t n = GetParam();
  auto inp = random_vector(n, 6, -4.0, 4.0), dout = random_vector(n, 7);
  std::vector<double> out(n), dinp(n);
  gelu_forward(out.data(), inp.data(), n);
  gelu_backward(dinp.data(), inp.data(), dout.data(), n);
  auto inp_f = to_float(inp), dout_f = to_float(dout);
  std::vector<float> out_f(n), dinp_f(n);
  gelu_forward(out_f.data(), inp_f.data(), n);
  gelu_backward(dinp_f.data(), inp_f.data(), dout_f.data(), n);
  EXPECT_LT(max_rel_error(std::vector<double>(out_f.begin(), out_f.end()), out), 1e-6);
  EXPECT_LT(max_rel_error(std::vector<double>(dinp_f.begin(), dinp_f.end()), dinp), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(OddSizes, GeluSizeTest, ::testing::Values(1, 7, 13, 91, 1031),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

}  // namespace
}  // namespace zero::kernels::cpu
