// Adam over a bf16 state (AdamShard's *_bf16: DeepSpeed's bf16_master_weights_and_grads and
// bf16_optimizer_states): bitwise against a torch trajectory (tools/golden/adamw_bf16_state.py),
// bitwise "the fp32 update of the widened state, rounded" on every ISA path (so the SIMD paths
// equal the scalar reference), thread / tile independence, and the distance to an fp32-state run.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/adamw/adamw.h"
#include "kernels/adamw/adamw_simd.h"

namespace zero::kernels::cpu {
namespace {

#include "kernels/adamw/adamw_bf16_state_golden.inc"

// A bf16 state: master weights, fp32 or bf16 moments, an fp32 gradient and a bf16 copy.
struct Bf16State {
  std::vector<bf16> p, m16, v16, copy;
  std::vector<float> m32, v32, g;
  bool bf16_moments = true;

  AdamShard shard(bool with_copy = false) {
    AdamShard s;
    s.param_bf16 = p.data();
    s.grad = g.data();
    if (bf16_moments) {
      s.exp_avg_bf16 = m16.data();
      s.exp_avg_sq_bf16 = v16.data();
    } else {
      s.exp_avg = m32.data();
      s.exp_avg_sq = v32.data();
    }
    s.numel = static_cast<int64_t>(p.size());
    if (with_copy) s.param_16bit = copy.data();
    return s;
  }
  float m(size_t i) const { return bf16_moments ? bf16_to_float(m16[i]) : m32[i]; }
  float v(size_t i) const { return bf16_moments ? bf16_to_float(v16[i]) : v32[i]; }
};

std::vector<CpuIsa> supported_isas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (cpu_isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

// Runs `s` with the scalar reference (isa nullopt-like kAuto) or one SIMD path.
void run(const AdamArgs& args, const AdamShard& s, float grad_scale, CpuIsa isa, bool reference,
         int64_t tile = 64) {
  if (reference) {
    adam_update(args, s, grad_scale);
    return;
  }
  AdamSimdOptions opts;
  opts.isa = isa;
  opts.tile_numel = tile;
  adam_update_simd(args, s, grad_scale, opts);
}

// ---- the torch trajectory, bitwise

struct GoldenMode {
  const char* name;
  bool adam_w, bf16_moments;
  const std::vector<uint16_t>* param;
  const std::vector<uint16_t>* m16;
  const std::vector<uint16_t>* v16;
  const std::vector<uint32_t>* m32;
  const std::vector<uint32_t>* v32;
};

std::vector<GoldenMode> golden_modes() {
  return {{"adamw bf16 moments", true, true, &kAdamWBf16MomentsParam, &kAdamWBf16MomentsExpAvg,
           &kAdamWBf16MomentsExpAvgSq, nullptr, nullptr},
          {"adamw fp32 moments", true, false, &kAdamWF32MomentsParam, nullptr, nullptr,
           &kAdamWF32MomentsExpAvg, &kAdamWF32MomentsExpAvgSq},
          {"adam-l2 bf16 moments", false, true, &kAdamL2Bf16MomentsParam, &kAdamL2Bf16MomentsExpAvg,
           &kAdamL2Bf16MomentsExpAvgSq, nullptr, nullptr}};
}

Bf16State golden_start(bool bf16_moments) {
  Bf16State st;
  st.bf16_moments = bf16_moments;
  for (int i = 0; i < kNumel; ++i) st.p.push_back(float_to_bf16(bits_float(kInitBits[i])));
  st.m16.assign(kNumel, bf16{});
  st.v16.assign(kNumel, bf16{});
  st.m32.assign(kNumel, 0.f);
  st.v32.assign(kNumel, 0.f);
  st.g.assign(kNumel, 0.f);
  st.copy.assign(kNumel, bf16{});
  return st;
}

AdamArgs golden_args(bool adam_w, int64_t step) {
  AdamArgs a;
  a.lr = kLr;
  a.beta1 = kBeta1;
  a.beta2 = kBeta2;
  a.eps = kEps;
  a.weight_decay = kWeightDecay;
  a.adam_w_mode = adam_w;
  a.step = step;
  return a;
}

TEST(AdamBf16State, MatchesTorchTrajectoryBitwise) {
  for (const GoldenMode& mode : golden_modes()) {
    for (CpuIsa isa : supported_isas()) {
      for (bool reference : {true, false}) {
        if (reference && isa != CpuIsa::kScalar) continue;
        Bf16State st = golden_start(mode.bf16_moments);
        const std::string what =
            std::string(mode.name) + " " + (reference ? "reference" : cpu_isa_name(isa).data());
        for (int s = 0; s < kSteps; ++s) {
          for (int i = 0; i < kNumel; ++i) st.g[i] = bits_float(kGradBits[s * kNumel + i]);
          run(golden_args(mode.adam_w, s + 1), st.shard(), 1.0f, isa, reference, 32);
          for (int i = 0; i < kNumel; ++i) {
            const size_t k = static_cast<size_t>(s * kNumel + i);
            ASSERT_EQ(st.p[i].bits, (*mode.param)[k]) << what << " step " << s + 1 << " i " << i;
            if (mode.bf16_moments) {
              ASSERT_EQ(st.m16[i].bits, (*mode.m16)[k]) << what << " exp_avg step " << s + 1;
              ASSERT_EQ(st.v16[i].bits, (*mode.v16)[k]) << what << " exp_avg_sq step " << s + 1;
            } else {
              ASSERT_EQ(float_bits(st.m32[i]), (*mode.m32)[k]) << what << " exp_avg " << s + 1;
              ASSERT_EQ(float_bits(st.v32[i]), (*mode.v32)[k]) << what << " exp_avg_sq " << s + 1;
            }
          }
        }
      }
    }
  }
}

// The bf16 master cannot take updates below half its ulp (2^-9 relative), so a bf16-state run
// drifts from the fp32 one by up to about one bf16 ulp (2^-8 relative) per step; it stays within
// that here (torch.optim.AdamW in fp32 from the same bf16 start, lr 1e-2).
TEST(AdamBf16State, StaysWithinABf16UlpPerStepOfTheFp32Trajectory) {
  Bf16State st = golden_start(true);
  double worst = 0.0;
  for (int s = 0; s < kSteps; ++s) {
    for (int i = 0; i < kNumel; ++i) st.g[i] = bits_float(kGradBits[s * kNumel + i]);
    adam_update(golden_args(true, s + 1), st.shard(), 1.0f);
    for (int i = 0; i < kNumel; ++i) {
      const double want = bits_float(kTorchAdamWFp32Param[static_cast<size_t>(s * kNumel + i)]);
      const double rel = std::abs(bf16_to_float(st.p[i]) - want) / std::max(std::abs(want), 1e-3);
      worst = std::max(worst, rel);
      EXPECT_LE(rel, (s + 1) * std::ldexp(1.0, -8)) << "step " << s + 1 << " i " << i;
    }
  }
  RecordProperty("worst_relative_difference", std::to_string(worst));
}

// ---- every path is "the fp32 update of the widened state, rounded"

// Random bf16 state with NaN / inf gradients and zero moments sprinkled in.
Bf16State random_state(int64_t n, bool bf16_moments, uint32_t seed) {
  Bf16State st;
  st.bf16_moments = bf16_moments;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t i = 0; i < n; ++i) {
    st.p.push_back(float_to_bf16(normal(rng)));
    float m = normal(rng) * 0.1f, v = std::abs(normal(rng)) * 0.01f;
    if (i % 23 == 11) {
      // Denormal moments (a zero gradient below keeps them denormal): rounded as float_to_bf16
      // does, not flushed to zero.
      m = -1e-39f;
      v = 3e-40f;
    }
    st.m32.push_back(bf16_moments ? round_to_bf16(m) : m);
    st.v32.push_back(bf16_moments ? round_to_bf16(v) : v);
    st.m16.push_back(float_to_bf16(m));
    st.v16.push_back(float_to_bf16(v));
    float g = i % 23 == 11 ? 0.f : normal(rng) * 1024.f;
    if (i % 17 == 5) g = std::numeric_limits<float>::quiet_NaN();
    if (i % 19 == 7) g = -std::numeric_limits<float>::infinity();
    if (i % 13 == 3) g = 1e-41f;  // a denormal
    st.g.push_back(g);
  }
  st.copy.assign(static_cast<size_t>(n), bf16{0xdead});
  return st;
}

// What every path must produce: the fp32 reference on the widened values, then rounded.
Bf16State widened_fp32_update(const Bf16State& in, const AdamArgs& args, float grad_scale) {
  const size_t n = in.p.size();
  std::vector<float> p(n), m(n), v(n);
  for (size_t i = 0; i < n; ++i) {
    p[i] = bf16_to_float(in.p[i]);
    m[i] = in.m(i);
    v[i] = in.v(i);
  }
  AdamShard s;
  s.param = p.data();
  s.grad = in.g.data();
  s.exp_avg = m.data();
  s.exp_avg_sq = v.data();
  s.numel = static_cast<int64_t>(n);
  adam_update(args, s, grad_scale);
  Bf16State out = in;
  for (size_t i = 0; i < n; ++i) {
    out.p[i] = float_to_bf16(p[i]);
    out.copy[i] = out.p[i];
    out.m16[i] = float_to_bf16(m[i]);
    out.v16[i] = float_to_bf16(v[i]);
    out.m32[i] = m[i];
    out.v32[i] = v[i];
  }
  return out;
}

::testing::AssertionResult same_state(const Bf16State& got, const Bf16State& want, bool copy) {
  for (size_t i = 0; i < want.p.size(); ++i) {
    const bool moments_equal =
        want.bf16_moments
            ? got.m16[i].bits == want.m16[i].bits && got.v16[i].bits == want.v16[i].bits
            : float_bits(got.m32[i]) == float_bits(want.m32[i]) &&
                  float_bits(got.v32[i]) == float_bits(want.v32[i]);
    if (got.p[i].bits != want.p[i].bits || !moments_equal ||
        (copy && got.copy[i].bits != want.copy[i].bits)) {
      return ::testing::AssertionFailure()
             << "first difference at " << i << ": param " << got.p[i].bits << " vs "
             << want.p[i].bits << ", exp_avg " << got.m(i) << " vs " << want.m(i) << ", exp_avg_sq "
             << got.v(i) << " vs " << want.v(i);
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(AdamBf16State, EveryPathIsTheWidenedFp32UpdateRounded) {
  const int64_t sizes[] = {0, 1, 7, 15, 16, 17, 31, 33, 100, 1031};
  struct Mode {
    bool adam_w;
    float wd;
  };
  for (CpuIsa isa : supported_isas()) {
    for (bool reference : {true, false}) {
      if (reference && isa != CpuIsa::kScalar) continue;
      for (int64_t n : sizes) {
        for (const Mode mode : {Mode{true, 0.01f}, Mode{false, 0.01f}, Mode{true, 0.f}}) {
          for (bool bf16_moments : {true, false}) {
            for (bool copy : {false, true}) {
              AdamArgs args;
              args.lr = 3e-3f;
              args.weight_decay = mode.wd;
              args.adam_w_mode = mode.adam_w;
              args.step = 1 + n % 4;
              args.bias_correction = n % 2 == 0;
              const Bf16State in =
                  random_state(n, bf16_moments, static_cast<uint32_t>(n * 3 + bf16_moments));
              const Bf16State want = widened_fp32_update(in, args, 1.f / 1024.f);
              Bf16State got = in;
              run(args, got.shard(copy), 1.f / 1024.f, isa, reference);
              EXPECT_TRUE(same_state(got, want, copy))
                  << (reference ? "reference" : cpu_isa_name(isa).data()) << " n=" << n
                  << " adamw=" << mode.adam_w << " wd=" << mode.wd
                  << " bf16_moments=" << bf16_moments << " copy=" << copy;
              if (HasFailure()) return;
            }
          }
        }
      }
    }
  }
}

TEST(AdamBf16State, ThreadAndTileIndependent) {
  const int64_t n = 100'003;
  AdamArgs args;
  args.weight_decay = 0.1f;
  args.step = 2;
  for (bool bf16_moments : {true, false}) {
    const Bf16State in = random_state(n, bf16_moments, 5);
    const Bf16State want = widened_fp32_update(in, args, 0.5f);
    for (CpuIsa isa : supported_isas()) {
      for (int threads : {1, 2, 3}) {
        for (int64_t tile : {int64_t{1}, int64_t{1000}, int64_t{1} << 16}) {
          Bf16State got = in;
          AdamSimdOptions opts;
          opts.isa = isa;
          opts.num_threads = threads;
          opts.tile_numel = tile;
          adam_update_simd(args, got.shard(true), 0.5f, opts);
          EXPECT_TRUE(same_state(got, want, true))
              << cpu_isa_name(isa) << " threads=" << threads << " tile=" << tile;
        }
      }
    }
  }
}

TEST(AdamBf16State, RejectsWhatDeepSpeedRefuses) {
  Bf16State st = random_state(8, true, 1);
  AdamArgs args;
  // bf16 moments need a bf16 master.
  std::vector<float> p32(8, 1.f);
  AdamShard s = st.shard();
  s.param = p32.data();
  s.param_bf16 = nullptr;
  EXPECT_DEATH(adam_update(args, s, 1.f), "bf16 moments need bf16 master");
  // Exactly one master.
  s.param_bf16 = st.p.data();
  EXPECT_DEATH(adam_update_simd(args, s, 1.f), "exactly one of param");
  // No rollback copy, no f16 copy.
  std::vector<float> prev(24);
  AdamShard with_prev = st.shard();
  with_prev.prev_param = prev.data();
  with_prev.prev_exp_avg = prev.data() + 8;
  with_prev.prev_exp_avg_sq = prev.data() + 16;
  EXPECT_DEATH(adam_update_simd(args, with_prev, 1.f), "no prev_");
  AdamShard f16_copy = st.shard(true);
  f16_copy.param_16bit_dtype = DType::kF16;
  EXPECT_DEATH(adam_update(args, f16_copy, 1.f), "must be bf16");
}

}  // namespace
}  // namespace zero::kernels::cpu
