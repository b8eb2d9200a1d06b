// Tests for the CPU RMSNorm: forward against the formula, fp64 finite-difference gradients,
// accumulation, float-vs-double agreement and thread-count independence, over odd shapes.
#include "kernels/rmsnorm/rmsnorm.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
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

struct Shape {
  int64_t N, C;
};

constexpr double kEps = 1e-6;

class RmsnormTest : public ::testing::TestWithParam<Shape> {};

TEST_P(RmsnormTest, ForwardMatchesFormula) {
  const Shape s = GetParam();
  auto inp = random_vector(s.N * s.C, 1, -2.0, 3.0), weight = random_vector(s.C, 2);
  std::vector<double> out(inp.size()), rstd(s.N);
  rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), s.N, s.C, kEps);
  for (int64_t n = 0; n < s.N; ++n) {
    double ms = 0;
    for (int64_t c = 0; c < s.C; ++c) ms += inp[n * s.C + c] * inp[n * s.C + c];
    const double r = 1.0 / std::sqrt(ms / s.C + kEps);
    EXPECT_NEAR(rstd[n], r, 1e-12 * r);
    for (int64_t c = 0; c < s.C; ++c) {
      EXPECT_NEAR(out[n * s.C + c], inp[n * s.C + c] * r * weight[c], 1e-12 * r);
    }
  }
}

TEST_P(RmsnormTest, BackwardMatchesFiniteDifferences) {
  const Shape s = GetParam();
  auto inp = random_vector(s.N * s.C, 3), weight = random_vector(s.C, 4),
       w = random_vector(s.N * s.C, 5);
  std::vector<double> out(inp.size()), rstd(s.N);
  auto loss = [&] {
    rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), s.N, s.C, kEps);
    return dot(w, out.data(), out.size());
  };
  loss();  // fills rstd for the analytic backward
  std::vector<double> dinp(inp.size()), dweight(s.C);
  rmsnorm_backward(dinp.data(), dweight.data(), w.data(), inp.data(), weight.data(), rstd.data(),
                   s.N, s.C);
  EXPECT_LT(max_rel_error(dinp, numeric_grad(inp, loss)), 1e-6);
  EXPECT_LT(max_rel_error(dweight, numeric_grad(weight, loss)), 1e-6);
}

TEST_P(RmsnormTest, BackwardAccumulates) {
  const Shape s = GetParam();
  auto inp = random_vector(s.N * s.C, 6), weight = random_vector(s.C, 7),
       dout = random_vector(s.N * s.C, 8);
  std::vector<double> out(inp.size()), rstd(s.N);
  rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), s.N, s.C, kEps);
  std::vector<double> g_inp(inp.size()), g_weight(s.C);
  rmsnorm_backward(g_inp.data(), g_weight.data(), dout.data(), inp.data(), weight.data(),
                   rstd.data(), s.N, s.C);
  auto dinp = random_vector(inp.size(), 9), dweight = random_vector(s.C, 10);
  const auto dinp0 = dinp, dweight0 = dweight;
  for (int call = 0; call < 2; ++call) {
    rmsnorm_backward(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(),
                     rstd.data(), s.N, s.C);
  }
  for (size_t i = 0; i < dinp.size(); ++i) EXPECT_NEAR(dinp[i], dinp0[i] + 2 * g_inp[i], 1e-10);
  for (int64_t c = 0; c < s.C; ++c) EXPECT_NEAR(dweight[c], dweight0[c] + 2 * g_weight[c], 1e-10);
}

TEST_P(RmsnormTest, FloatMatchesDouble) {
  const Shape s = GetParam();
  auto inp = random_vector(s.N * s.C, 11), weight = random_vector(s.C, 12),
       dout = random_vector(s.N * s.C, 13);
  std::vector<double> out(inp.size()), rstd(s.N), dinp(inp.size()), dweight(s.C);
  rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), s.N, s.C, kEps);
  rmsnorm_backward(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(), rstd.data(),
                   s.N, s.C);
  auto inp_f = to_float(inp), weight_f = to_float(weight), dout_f = to_float(dout);
  std::vector<float> out_f(inp.size()), rstd_f(s.N), dinp_f(inp.size()), dweight_f(s.C);
  rmsnorm_forward(out_f.data(), rstd_f.data(), inp_f.data(), weight_f.data(), s.N, s.C,
                  static_cast<float>(kEps));
  rmsnorm_backward(dinp_f.data(), dweight_f.data(), dout_f.data(), inp_f.data(), weight_f.data(),
                   rstd_f.data(), s.N, s.C);
  auto as_double = [](const std::vector<float>& v) {
    return std::vector<double>(v.begin(), v.end());
  };
  EXPECT_LT(max_rel_error(as_double(out_f), out), 1e-5);
  // dinp is a difference of terms of size rstd * |dout * weight| that nearly cancel for tiny C
  // (C = 1 normalises to ±1 whatever the input), so measure the float error against that size.
  double term_scale = 1e-12, max_abs_err = 0;
  for (int64_t n = 0; n < s.N; ++n) {
    for (int64_t c = 0; c < s.C; ++c) {
      term_scale = std::max(term_scale, std::fabs(dout[n * s.C + c] * weight[c]) * rstd[n]);
      max_abs_err = std::max(max_abs_err, std::fabs(dinp_f[n * s.C + c] - dinp[n * s.C + c]));
    }
  }
  EXPECT_LT(max_abs_err / term_scale, 1e-5);
  EXPECT_LT(max_rel_error(as_double(dweight_f), dweight), 1e-5);
}

TEST_P(RmsnormTest, BackwardIndependentOfThreadCount) {
  const Shape s = GetParam();
  auto inp = to_float(random_vector(s.N * s.C, 14)), weight = to_float(random_vector(s.C, 15)),
       dout = to_float(random_vector(s.N * s.C, 16));
  std::vector<float> out(inp.size()), rstd(s.N);
  rmsnorm_forward(out.data(), rstd.data(), inp.data(), weight.data(), s.N, s.C, 1e-6f);
  std::vector<std::vector<float>> results;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> dinp(inp.size()), dweight(s.C);
    rmsnorm_backward(dinp.data(), dweight.data(), dout.data(), inp.data(), weight.data(),
                     rstd.data(), s.N, s.C);
    dinp.insert(dinp.end(), dweight.begin(), dweight.end());
    results.push_back(dinp);
  }
  omp_set_num_threads(saved);
  EXPECT_EQ(results[1], results[0]);
  EXPECT_EQ(results[2], results[0]);
}

INSTANTIATE_TEST_SUITE_P(OddShapes, RmsnormTest,
                         ::testing::Values(Shape{1, 1}, Shape{1, 13}, Shape{7, 13}, Shape{3, 17},
                                           Shape{5, 2}, Shape{11, 131}),
                         [](const auto& info) {
                           return std::to_string(info.param.N) + "x" + std::to_string(info.param.C);
                         });

}  // namespace
}  // namespace zero::kernels::cpu
