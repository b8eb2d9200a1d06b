// Tests for CPU causal GQA attention (plain causal, sliding window, extra score divisor,
// soft-capping): FD gradients, causality, a naive expanded-heads reference, float/double agreement
// and thread-count independence. Legend: B batch, T time, Hq / Hkv heads, D head_dim. q/out
// (B,T,Hq,D); k/v (B,T,Hkv,D).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/grad_check.h"

namespace zero::kernels::cpu {
namespace {

using testing::dot;
using testing::max_rel_error;
using testing::numeric_grad;
using testing::random_vector;
using testing::to_float;

struct AttnShape {
  int64_t B, T, Hq, Hkv, D;
  int64_t W = 0;         // sliding window (0: plain causal)
  double divisor = 1.0;  // extra score divisor (GPT-2 scale_attn_by_inverse_layer_idx)
  double cap = 0.0;      // score soft-capping (Gemma 2 attn_logit_softcapping; 0: none)
};

void PrintTo(const AttnShape& s, std::ostream* os) {
  *os << "B" << s.B << "_T" << s.T << "_Hq" << s.Hq << "_Hkv" << s.Hkv << "_D" << s.D << "_W" << s.W
      << "_div" << s.divisor << "_cap" << s.cap;
}

// Repeats each kv head G = Hq / Hkv times: (B, T, Hkv, D) -> (B, T, Hq, D).
std::vector<double> expand_kv(const std::vector<double>& x, const AttnShape& s) {
  const int64_t G = s.Hq / s.Hkv;
  std::vector<double> y(s.B * s.T * s.Hq * s.D);
  for (int64_t bt = 0; bt < s.B * s.T; ++bt)
    for (int64_t h = 0; h < s.Hq; ++h)
      for (int64_t d = 0; d < s.D; ++d)
        y[(bt * s.Hq + h) * s.D + d] = x[(bt * s.Hkv + h / G) * s.D + d];
  return y;
}

// Textbook multi-head attention on expanded heads: full score matrix, -inf mask, softmax.
std::vector<double> naive_attention(const std::vector<double>& q, const std::vector<double>& k_exp,
                                    const std::vector<double>& v_exp, const AttnShape& s) {
  const int64_t T = s.T, H = s.Hq, D = s.D;
  std::vector<double> out(s.B * T * H * D, 0.0);
  std::vector<double> scores(T * T);
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      auto at = [&](const std::vector<double>& x, int64_t t, int64_t d) {
        return x[((b * T + t) * H + h) * D + d];
      };
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t u = 0; u < T; ++u) {
          double sc = 0;
          for (int64_t d = 0; d < D; ++d) sc += at(q, t, d) * at(k_exp, u, d);
          // Masked: the future, and with a window W the keys with t - u >= W (HF Mistral).
          const bool masked = u > t || (s.W > 0 && t - u >= s.W);
          scores[t * T + u] = masked ? -std::numeric_limits<double>::infinity()
                                     : sc / (std::sqrt(double(D)) * s.divisor);
          if (!masked && s.cap > 0)
            scores[t * T + u] = s.cap * std::tanh(scores[t * T + u] / s.cap);
        }
        double sum = 0;
        for (int64_t u = 0; u < T; ++u) sum += std::exp(scores[t * T + u]);
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t u = 0; u < T; ++u)
            acc += std::exp(scores[t * T + u]) / sum * at(v_exp, u, d);
          out[((b * T + t) * H + h) * D + d] = acc;
        }
      }
    }
  }
  return out;
}

class AttentionShapes : public ::testing::TestWithParam<AttnShape> {
 protected:
  int64_t q_numel() const { return s().B * s().T * s().Hq * s().D; }
  int64_t kv_numel() const { return s().B * s().T * s().Hkv * s().D; }
  int64_t att_numel() const { return s().B * s().Hq * s().T * s().T; }
  const AttnShape& s() const { return GetParam(); }
};

TEST_P(AttentionShapes, MatchesNaiveExpandedHeads) {
  const auto sh = s();
  const auto q = random_vector(q_numel(), 1, -2, 2);
  const auto k = random_vector(kv_numel(), 2, -2, 2);
  const auto v = random_vector(kv_numel(), 3);
  std::vector<double> out(q_numel()), att(att_numel(), 7.0);
  attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), sh.B, sh.T, sh.Hq, sh.Hkv,
                    sh.D, sh.W, sh.divisor, sh.cap);
  const auto want = naive_attention(q, expand_kv(k, sh), expand_kv(v, sh), sh);
  EXPECT_LT(max_rel_error(out, want), 1e-13);
  // att rows are distributions over s <= t with exact zeros above the diagonal.
  for (int64_t bh = 0; bh < sh.B * sh.Hq; ++bh) {
    for (int64_t t = 0; t < sh.T; ++t) {
      double sum = 0;
      for (int64_t u = 0; u < sh.T; ++u) {
        const double p = att[(bh * sh.T + t) * sh.T + u];
        if (u > t || (sh.W > 0 && t - u >= sh.W)) {
          EXPECT_EQ(p, 0.0);
        }
        sum += p;
      }
      EXPECT_NEAR(sum, 1.0, 1e-14);
    }
  }
}

TEST_P(AttentionShapes, BackwardMatchesFiniteDifferences) {
  const auto sh = s();
  auto q = random_vector(q_numel(), 11);
  auto k = random_vector(kv_numel(), 12);
  auto v = random_vector(kv_numel(), 13);
  const auto w = random_vector(q_numel(), 14);
  std::vector<double> out(q_numel()), att(att_numel());
  auto loss = [&] {
    attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), sh.B, sh.T, sh.Hq,
                      sh.Hkv, sh.D, sh.W, sh.divisor, sh.cap);
    return dot(w, out.data(), out.size());
  };
  const auto want_dq = numeric_grad(q, loss);
  const auto want_dk = numeric_grad(k, loss);
  const auto want_dv = numeric_grad(v, loss);
  loss();
  // backward accumulates: start from non-zero gradients and subtract them afterwards.
  const auto dq0 = random_vector(q_numel(), 15);
  const auto dk0 = random_vector(kv_numel(), 16);
  const auto dv0 = random_vector(kv_numel(), 17);
  auto dq = dq0, dk = dk0, dv = dv0;
  attention_backward(dq.data(), dk.data(), dv.data(), w.data(), att.data(), q.data(), k.data(),
                     v.data(), sh.B, sh.T, sh.Hq, sh.Hkv, sh.D, sh.divisor, sh.cap);
  for (size_t i = 0; i < dq.size(); ++i) dq[i] -= dq0[i];
  for (size_t i = 0; i < dk.size(); ++i) dk[i] -= dk0[i];
  for (size_t i = 0; i < dv.size(); ++i) dv[i] -= dv0[i];
  EXPECT_LT(max_rel_error(dq, want_dq), 1e-7);
  EXPECT_LT(max_rel_error(dk, want_dk), 1e-7);
  EXPECT_LT(max_rel_error(dv, want_dv), 1e-7);
}

// GQA backward equals plain MHA backward on expanded kv heads, with dk/dv summed over each group.
TEST_P(AttentionShapes, BackwardMatchesExpandedHeads) {
  const auto sh = s();
  const int64_t G = sh.Hq / sh.Hkv;
  const auto q = random_vector(q_numel(), 21);
  const auto k = random_vector(kv_numel(), 22);
  const auto v = random_vector(kv_numel(), 23);
  const auto dout = random_vector(q_numel(), 24);
  std::vector<double> out(q_numel()), att(att_numel());
  attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), sh.B, sh.T, sh.Hq, sh.Hkv,
                    sh.D, sh.W, sh.divisor, sh.cap);
  std::vector<double> dq(q_numel()), dk(kv_numel()), dv(kv_numel());
  attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), att.data(), q.data(), k.data(),
                     v.data(), sh.B, sh.T, sh.Hq, sh.Hkv, sh.D, sh.divisor, sh.cap);

  const auto k_exp = expand_kv(k, sh), v_exp = expand_kv(v, sh);
  std::vector<double> out_e(q_numel()), att_e(att_numel());
  attention_forward(out_e.data(), att_e.data(), q.data(), k_exp.data(), v_exp.data(), sh.B, sh.T,
                    sh.Hq, sh.Hq, sh.D, sh.W, sh.divisor, sh.cap);
  EXPECT_EQ(att_e, att);
  std::vector<double> dq_e(q_numel()), dk_e(q_numel()), dv_e(q_numel());
  attention_backward(dq_e.data(), dk_e.data(), dv_e.data(), dout.data(), att_e.data(), q.data(),
                     k_exp.data(), v_exp.data(), sh.B, sh.T, sh.Hq, sh.Hq, sh.D, sh.divisor,
                     sh.cap);
  std::vector<double> dk_sum(kv_numel(), 0.0), dv_sum(kv_numel(), 0.0);
  for (int64_t bt = 0; bt < sh.B * sh.T; ++bt)
    for (int64_t h = 0; h < sh.Hq; ++h)
      for (int64_t d = 0; d < sh.D; ++d) {
        dk_sum[(bt * sh.Hkv + h / G) * sh.D + d] += dk_e[(bt * sh.Hq + h) * sh.D + d];
        dv_sum[(bt * sh.Hkv + h / G) * sh.D + d] += dv_e[(bt * sh.Hq + h) * sh.D + d];
      }
  EXPECT_LT(max_rel_error(dq, dq_e), 1e-14);
  EXPECT_LT(max_rel_error(dk, dk_sum), 1e-13);
  EXPECT_LT(max_rel_error(dv, dv_sum), 1e-13);
}

TEST_P(AttentionShapes, FutureKeysAndValuesDoNotChangeEarlierOutputs) {
  const auto sh = s();
  const auto q = random_vector(q_numel(), 31);
  const auto k = random_vector(kv_numel(), 32);
  const auto v = random_vector(kv_numel(), 33);
  std::vector<double> out(q_numel()), att(att_numel());
  attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), sh.B, sh.T, sh.Hq, sh.Hkv,
                    sh.D, sh.W, sh.divisor, sh.cap);
  for (int64_t t0 = 0; t0 < sh.T; ++t0) {
    // Replace k, v at every position after t0.
    auto k2 = k, v2 = v;
    const auto noise = random_vector(kv_numel(), 100 + t0, -5, 5);
    for (int64_t b = 0; b < sh.B; ++b)
      for (int64_t t = t0 + 1; t < sh.T; ++t)
        for (int64_t i = 0; i < sh.Hkv * sh.D; ++i) {
          const int64_t idx = (b * sh.T + t) * sh.Hkv * sh.D + i;
          k2[idx] = noise[idx];
          v2[idx] = -noise[idx];
        }
    std::vector<double> out2(q_numel()), att2(att_numel());
    attention_forward(out2.data(), att2.data(), q.data(), k2.data(), v2.data(), sh.B, sh.T, sh.Hq,
                      sh.Hkv, sh.D, sh.W, sh.divisor, sh.cap);
    for (int64_t b = 0; b < sh.B; ++b)
      for (int64_t t = 0; t <= t0; ++t)
        for (int64_t i = 0; i < sh.Hq * sh.D; ++i) {
          const int64_t idx = (b * sh.T + t) * sh.Hq * sh.D + i;
          ASSERT_EQ(out2[idx], out[idx]) << "t0 " << t0 << " t " << t;
        }
  }
}

TEST_P(AttentionShapes, FloatAgreesWithDouble) {
  const auto sh = s();
  const auto q = random_vector(q_numel(), 41);
  const auto k = random_vector(kv_numel(), 42);
  const auto v = random_vector(kv_numel(), 43);
  const auto dout = random_vector(q_numel(), 44);
  std::vector<double> out(q_numel()), att(att_numel()), dq(q_numel()), dk(kv_numel()),
      dv(kv_numel());
  attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), sh.B, sh.T, sh.Hq, sh.Hkv,
                    sh.D, sh.W, sh.divisor, sh.cap);
  attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), att.data(), q.data(), k.data(),
                     v.data(), sh.B, sh.T, sh.Hq, sh.Hkv, sh.D, sh.divisor, sh.cap);
  const auto qf = to_float(q), kf = to_float(k), vf = to_float(v), doutf = to_float(dout);
  std::vector<float> outf(q_numel()), attf(att_numel()), dqf(q_numel()), dkf(kv_numel()),
      dvf(kv_numel());
  attention_forward(outf.data(), attf.data(), qf.data(), kf.data(), vf.data(), sh.B, sh.T, sh.Hq,
                    sh.Hkv, sh.D, sh.W, sh.divisor, sh.cap);
  attention_backward(dqf.data(), dkf.data(), dvf.data(), doutf.data(), attf.data(), qf.data(),
                     kf.data(), vf.data(), sh.B, sh.T, sh.Hq, sh.Hkv, sh.D, sh.divisor, sh.cap);
  auto widen = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
  EXPECT_LT(max_rel_error(widen(outf), out), 1e-5);
  EXPECT_LT(max_rel_error(widen(attf), att), 1e-5);
  EXPECT_LT(max_rel_error(widen(dqf), dq), 1e-5);
  EXPECT_LT(max_rel_error(widen(dkf), dk), 1e-5);
  EXPECT_LT(max_rel_error(widen(dvf), dv), 1e-5);
}

TEST_P(AttentionShapes, ResultDoesNotDependOnThreadCount) {
  const auto sh = s();
  const auto q = to_float(random_vector(q_numel(), 51));
  const auto k = to_float(random_vector(kv_numel(), 52));
  const auto v = to_float(random_vector(kv_numel(), 53));
  const auto dout = to_float(random_vector(q_numel(), 54));
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> out(q_numel()), att(att_numel()), dq(q_numel()), dk(kv_numel()),
        dv(kv_numel());
    attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), sh.B, sh.T, sh.Hq,
                      sh.Hkv, sh.D, sh.W, sh.divisor, sh.cap);
    attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), att.data(), q.data(), k.data(),
                       v.data(), sh.B, sh.T, sh.Hq, sh.Hkv, sh.D, sh.divisor, sh.cap);
    omp_set_num_threads(saved);
    return std::vector<std::vector<float>>{out, att, dq, dk, dv};
  };
  EXPECT_EQ(run(1), run(3));
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionShapes,
                         ::testing::Values(AttnShape{1, 1, 1, 1, 3}, AttnShape{2, 5, 2, 2, 3},
                                           AttnShape{1, 7, 3, 3, 8}, AttnShape{2, 5, 4, 2, 3},
                                           AttnShape{1, 7, 2, 1, 8}, AttnShape{2, 7, 4, 1, 3},
                                           AttnShape{1, 5, 8, 2, 8}, AttnShape{1, 1, 4, 1, 8},
                                           // Sliding window (Mistral / Qwen2), every path.
                                           AttnShape{2, 7, 4, 2, 3, 3}, AttnShape{1, 9, 2, 1, 8, 1},
                                           AttnShape{1, 7, 3, 3, 8, 4}, AttnShape{1, 5, 2, 2, 3, 9},
                                           // GPT-2 scale_attn_by_inverse_layer_idx (layer 2).
                                           AttnShape{2, 5, 2, 2, 3, 0, 3.0},
                                           AttnShape{1, 7, 4, 2, 8, 3, 2.0},
                                           // Gemma 2 soft-capping, with GQA and a window.
                                           AttnShape{2, 5, 4, 2, 3, 0, 1.0, 0.7},
                                           AttnShape{1, 7, 2, 1, 8, 3, 1.0, 1.5}));

}  // namespace
}  // namespace zero::kernels::cpu
