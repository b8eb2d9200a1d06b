// Tests for the CPU dense layer: a naive triple loop, fp64 finite-difference gradients, gradient
// accumulation and null gradient pointers, and float-vs-double agreement, over odd shapes.
#include "kernels/matmul/matmul.h"

#include <gtest/gtest.h>

#include <cstdint>
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
  int64_t N, C, OC;
};

class MatmulTest : public ::testing::TestWithParam<Shape> {};

// out(N, OC) = inp(N, C) · weight(OC, C)^T + bias(OC), the obvious way.
std::vector<double> naive_forward(const std::vector<double>& inp, const std::vector<double>& weight,
                                  const double* bias, const Shape& s) {
  std::vector<double> out(s.N * s.OC);
  for (int64_t n = 0; n < s.N; ++n) {
    for (int64_t o = 0; o < s.OC; ++o) {
      double acc = bias ? bias[o] : 0.0;
      for (int64_t c = 0; c < s.C; ++c) acc += inp[n * s.C + c] * weight[o * s.C + c];
      out[n * s.OC + o] = acc;
    }
  }
  return out;
}

TEST_P(MatmulTest, ForwardMatchesNaiveLoop) {
  const Shape s = GetParam();
  auto inp = random_vector(s.N * s.C, 1), weight = random_vector(s.OC * s.C, 2),
       bias = random_vector(s.OC, 3);
  for (bool with_bias : {false, true}) {
    const double* b = with_bias ? bias.data() : nullptr;
    std::vector<double> out(s.N * s.OC, 123.0);  // garbage: forward must overwrite
    matmul_forward(out.data(), inp.data(), weight.data(), b, s.N, s.C, s.OC);
    EXPECT_LT(max_rel_error(out, naive_forward(inp, weight, b, s)), 1e-13) << "bias " << with_bias;
  }
}

TEST_P(MatmulTest, BackwardMatchesFiniteDifferences) {
  const Shape s = GetParam();
  auto inp = random_vector(s.N * s.C, 4), weight = random_vector(s.OC * s.C, 5),
       bias = random_vector(s.OC, 6), w = random_vector(s.N * s.OC, 7);
  std::vector<double> out(s.N * s.OC);
  auto loss = [&] {
    matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), s.N, s.C, s.OC);
    return dot(w, out.data(), out.size());
  };
  std::vector<double> dinp(inp.size()), dweight(weight.size()), dbias(bias.size());
  matmul_backward(dinp.data(), dweight.data(), dbias.data(), w.data(), inp.data(), weight.data(),
                  s.N, s.C, s.OC);
  EXPECT_LT(max_rel_error(dinp, numeric_grad(inp, loss)), 1e-6);
  EXPECT_LT(max_rel_error(dweight, numeric_grad(weight, loss)), 1e-6);
  EXPECT_LT(max_rel_error(dbias, numeric_grad(bias, loss)), 1e-6);
}

TEST_P(MatmulTest, BackwardAccumulatesAndSkipsNullGradients) {
  const Shape s = GetParam();
  auto inp = random_vector(s.N * s.C, 8), weight = random_vector(s.OC * s.C, 9),
       dout = random_vector(s.N * s.OC, 10);
  std::vector<double> g_inp(inp.size()), g_weight(weight.size()), g_bias(s.OC);
  matmul_backward(g_inp.data(), g_weight.data(), g_bias.data(), dout.data(), inp.data(),
                  weight.data(), s.N, s.C, s.OC);

  auto dinp = random_vector(inp.size(), 11), dweight = random_vector(weight.size(), 12),
       dbias = random_vector(s.OC, 13);
  const auto dinp0 = dinp, dweight0 = dweight, dbias0 = dbias;
  for (int call = 0; call < 2; ++call) {
    matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                    weight.data(), s.N, s.C, s.OC);
  }
  for (size_t i = 0; i < dinp.size(); ++i) EXPECT_NEAR(dinp[i], dinp0[i] + 2 * g_inp[i], 1e-12);
  for (size_t i = 0; i < dweight.size(); ++i) {
    EXPECT_NEAR(dweight[i], dweight0[i] + 2 * g_weight[i], 1e-12);
  }
  for (size_t i = 0; i < dbias.size(); ++i) EXPECT_NEAR(dbias[i], dbias0[i] + 2 * g_bias[i], 1e-12);

  // Each gradient alone: the others are null and must not be touched.
  std::vector<double> only(inp.size());
  matmul_backward<double>(only.data(), nullptr, nullptr, dout.data(), inp.data(), weight.data(),
                          s.N, s.C, s.OC);
  EXPECT_LT(max_rel_error(only, g_inp), 1e-14);
  only.assign(weight.size(), 0.0);
  matmul_backward<double>(nullptr, only.data(), nullptr, dout.data(), inp.data(), weight.data(),
                          s.N, s.C, s.OC);
  EXPECT_LT(max_rel_error(only, g_weight), 1e-14);
  only.assign(s.OC, 0.0);
  matmul_backward<double>(nullptr, nullptr, only.data(), dout.data(), inp.data(), weight.data(),
                          s.N, s.C, s.OC);
  EXPECT_LT(max_rel_error(only, g_bias), 1e-14);
}

TEST_P(MatmulTest, FloatMatchesDouble) {
  const Shape s = GetParam();
  auto inp = random_vector(s.N * s.C, 14), weight = random_vector(s.OC * s.C, 15),
       bias = random_vector(s.OC, 16), dout = random_vector(s.N * s.OC, 17);
  std::vector<double> out(s.N * s.OC), dinp(inp.size()), dweight(weight.size()), dbias(s.OC);
  matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), s.N, s.C, s.OC);
  matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                  s.N, s.C, s.OC);

  auto inp_f = to_float(inp), weight_f = to_float(weight), bias_f = to_float(bias),
       dout_f = to_float(dout);
  std::vector<float> out_f(out.size()), dinp_f(dinp.size()), dweight_f(dweight.size()),
      dbias_f(s.OC);
  matmul_forward(out_f.data(), inp_f.data(), weight_f.data(), bias_f.data(), s.N, s.C, s.OC);
  matmul_backward(dinp_f.data(), dweight_f.data(), dbias_f.data(), dout_f.data(), inp_f.data(),
                  weight_f.data(), s.N, s.C, s.OC);
  auto as_double = [](const std::vector<float>& v) {
    return std::vector<double>(v.begin(), v.end());
  };
  EXPECT_LT(max_rel_error(as_double(out_f), out), 1e-5);
  EXPECT_LT(max_rel_error(as_double(dinp_f), dinp), 1e-5);
  EXPECT_LT(max_rel_error(as_double(dweight_f), dweight), 1e-5);
  EXPECT_LT(max_rel_error(as_double(dbias_f), dbias), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(OddShapes, MatmulTest,
                         ::testing::Values(Shape{1, 1, 1}, Shape{1, 13, 7}, Shape{7, 13, 5},
                                           Shape{3, 17, 11}, Shape{5, 2, 19}, Shape{13, 7, 67},
                                           Shape{31, 1, 3}),
                         [](const auto& info) {
                           const Shape& s = info.param;
                           return std::to_string(s.N) + "x" + std::to_string(s.C) + "x" +
                                  std::to_string(s.OC);
                         });

}  // namespace
}  // namespace zero::kernels::cpu
