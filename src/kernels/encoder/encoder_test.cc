// Tests for the CPU embedding: lookup with and without learned positions, fp64 finite-difference
// gradients (repeated tokens), accumulation, float-vs-double, thread-count independence.
#include "kernels/encoder/encoder.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cstdint>
#include <random>
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
  int64_t B, T, C, V;
};

class EncoderTest : public ::testing::TestWithParam<Shape> {};

// Token ids in [0, V) from a fixed seed; small V makes repeats (the scatter-add case) likely.
std::vector<int32_t> random_tokens(int64_t n, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(V - 1));
  std::vector<int32_t> tokens(n);
  for (auto& t : tokens) t = dist(rng);
  return tokens;
}

TEST_P(EncoderTest, ForwardLooksUpRows) {
  const Shape s = GetParam();
  auto tokens = random_tokens(s.B * s.T, s.V, 1);
  auto wte = random_vector(s.V * s.C, 2), wpe = random_vector(s.T * s.C, 3);
  for (bool with_wpe : {false, true}) {
    std::vector<double> out(s.B * s.T * s.C, 99.0);
    encoder_forward(out.data(), tokens.data(), wte.data(), with_wpe ? wpe.data() : nullptr, s.B,
                    s.T, s.C, s.V);
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t t = 0; t < s.T; ++t) {
        for (int64_t c = 0; c < s.C; ++c) {
          const int64_t bt = b * s.T + t;
          const double want = wte[tokens[bt] * s.C + c] + (with_wpe ? wpe[t * s.C + c] : 0.0);
          ASSERT_EQ(out[bt * s.C + c], want) << "b " << b << " t " << t << " c " << c;
        }
      }
    }
  }
}

TEST_P(EncoderTest, BackwardMatchesFiniteDifferences) {
  const Shape s = GetParam();
  auto tokens = random_tokens(s.B * s.T, s.V, 4);
  auto wte = random_vector(s.V * s.C, 5), wpe = random_vector(s.T * s.C, 6),
       w = random_vector(s.B * s.T * s.C, 7);
  for (bool with_wpe : {false, true}) {
    std::vector<double> out(w.size());
    auto loss = [&] {
      encoder_forward(out.data(), tokens.data(), wte.data(), with_wpe ? wpe.data() : nullptr, s.B,
                      s.T, s.C, s.V);
      return dot(w, out.data(), out.size());
    };
    std::vector<double> dwte(wte.size()), dwpe(wpe.size());
    encoder_backward(dwte.data(), with_wpe ? dwpe.data() : nullptr, w.data(), tokens.data(), s.B,
                     s.T, s.C, s.V);
    EXPECT_LT(max_rel_error(dwte, numeric_grad(wte, loss)), 1e-6);
    if (with_wpe) {
      EXPECT_LT(max_rel_error(dwpe, numeric_grad(wpe, loss)), 1e-6);
    }
  }
}

TEST_P(EncoderTest, BackwardAccumulates) {
  const Shape s = GetParam();
  auto tokens = random_tokens(s.B * s.T, s.V, 8);
  auto dout = random_vector(s.B * s.T * s.C, 9);
  std::vector<double> g_wte(s.V * s.C), g_wpe(s.T * s.C);
  encoder_backward(g_wte.data(), g_wpe.data(), dout.data(), tokens.data(), s.B, s.T, s.C, s.V);
  auto dwte = random_vector(g_wte.size(), 10), dwpe = random_vector(g_wpe.size(), 11);
  const auto dwte0 = dwte, dwpe0 = dwpe;
  for (int call = 0; call < 2; ++call) {
    encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), s.B, s.T, s.C, s.V);
  }
  for (size_t i = 0; i < dwte.size(); ++i) EXPECT_NEAR(dwte[i], dwte0[i] + 2 * g_wte[i], 1e-12);
  for (size_t i = 0; i < dwpe.size(); ++i) EXPECT_NEAR(dwpe[i], dwpe0[i] + 2 * g_wpe[i], 1e-12);
}

TEST_P(EncoderTest, FloatMatchesDouble) {
  const Shape s = GetParam();
  auto tokens = random_tokens(s.B * s.T, s.V, 12);
  auto wte = random_vector(s.V * s.C, 13), wpe = random_vector(s.T * s.C, 14),
       dout = random_vector(s.B * s.T * s.C, 15);
  std::vector<double> out(dout.size()), dwte(wte.size()), dwpe(wpe.size());
  encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), s.B, s.T, s.C, s.V);
  encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), s.B, s.T, s.C, s.V);
  auto wte_f = to_float(wte), wpe_f = to_float(wpe), dout_f = to_float(dout);
  std::vector<float> out_f(out.size()), dwte_f(dwte.size()), dwpe_f(dwpe.size());
  encoder_forward(out_f.data(), tokens.data(), wte_f.data(), wpe_f.data(), s.B, s.T, s.C, s.V);
  encoder_backward(dwte_f.data(), dwpe_f.data(), dout_f.data(), tokens.data(), s.B, s.T, s.C, s.V);
  auto as_double = [](const std::vector<float>& v) {
    return std::vector<double>(v.begin(), v.end());
  };
  EXPECT_LT(max_rel_error(as_double(out_f), out), 1e-6);
  EXPECT_LT(max_rel_error(as_double(dwte_f), dwte), 1e-5);
  EXPECT_LT(max_rel_error(as_double(dwpe_f), dwpe), 1e-5);
}

TEST_P(EncoderTest, BackwardIndependentOfThreadCount) {
  const Shape s = GetParam();
  auto tokens = random_tokens(s.B * s.T, s.V, 16);
  auto dout = to_float(random_vector(s.B * s.T * s.C, 17));
  std::vector<std::vector<float>> dwte_by_threads, dwpe_by_threads;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    std::vector<float> dwte(s.V * s.C), dwpe(s.T * s.C);
    encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), s.B, s.T, s.C, s.V);
    dwte_by_threads.push_back(dwte);
    dwpe_by_threads.push_back(dwpe);
  }
  omp_set_num_threads(saved);
  for (size_t k = 1; k < dwte_by_threads.size(); ++k) {
    EXPECT_EQ(dwte_by_threads[k], dwte_by_threads[0]);
    EXPECT_EQ(dwpe_by_threads[k], dwpe_by_threads[0]);
  }
}

INSTANTIATE_TEST_SUITE_P(OddShapes, EncoderTest,
                         ::testing::Values(Shape{1, 1, 1, 1}, Shape{1, 7, 13, 5},
                                           Shape{3, 5, 17, 3}, Shape{2, 3, 131, 7},
                                           Shape{5, 1, 2, 11}),
                         [](const auto& info) {
                           const Shape& s = info.param;
                           return std::to_string(s.B) + "x" + std::to_string(s.T) + "x" +
                                  std::to_string(s.C) + "_V" + std::to_string(s.V);
                         });

}  // namespace
}  // namespace zero::kernels::cpu
