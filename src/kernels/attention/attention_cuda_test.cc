// Tests for the CUDA flash-style attention against the CPU twin (attention.h, which materialises
// att) over storage dtypes x shapes: T = 1, prime T, T spanning several tiles, multi-head and GQA
// (Hkv = Hq, Hq/2, 1), and head dims in every bucket including ones that pad (1, 3, 8, 80, 200);
// sliding windows, score divisors and Gemma 2's soft-capped scores.
// Legend: B batch, T time, Hq / Hkv heads, D head_dim. q/out (B,T,Hq,D); k/v (B,T,Hkv,D);
// lse (B,Hq,T).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/cuda_stream.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/cuda_test_util.h"
#include "kernels/grad_check.h"

namespace zero::kernels {
namespace {

using testing::all_close;
using testing::DeviceArray;
using testing::dtype_of;
using testing::norm_close;
using testing::random_vector;
using testing::rounded;
using testing::to_float;
using testing::to_storage;

struct AttnShape {
  int64_t B, T, Hq, Hkv, D;
  int64_t W = 0;         // sliding window (0: plain causal)
  double divisor = 1.0;  // extra score divisor (GPT-2 scale_attn_by_inverse_layer_idx)
  double softcap = 0.0;  // Gemma 2's attn_logit_softcapping (0: none)
  int64_t q_numel() const { return B * T * Hq * D; }
  int64_t kv_numel() const { return B * T * Hkv * D; }
  int64_t lse_numel() const { return B * Hq * T; }
};

void PrintTo(const AttnShape& s, std::ostream* os) {
  *os << "B" << s.B << "_T" << s.T << "_Hq" << s.Hq << "_Hkv" << s.Hkv << "_D" << s.D << "_W" << s.W
      << "_cap" << s.softcap;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }
std::vector<float> to_f32(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// lse[b, h, t] = log Σ_{s<=t} exp(q_t·k_s / sqrt(D)) in double (each score soft-capped first with
// a softcap): the quantity the forward saves.
std::vector<float> reference_lse(const std::vector<double>& q, const std::vector<double>& k,
                                 const AttnShape& s) {
  const int64_t G = s.Hq / s.Hkv;
  const double scale = 1.0 / (std::sqrt(static_cast<double>(s.D)) * s.divisor);
  std::vector<float> lse(s.lse_numel());
  std::vector<double> scores(s.T);
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.Hq; ++h) {
      for (int64_t t = 0; t < s.T; ++t) {
        double max_score = -std::numeric_limits<double>::infinity();
        const int64_t u0 = s.W > 0 ? std::max<int64_t>(0, t - s.W + 1) : 0;
        for (int64_t u = u0; u <= t; ++u) {
          double dot = 0;
          for (int64_t d = 0; d < s.D; ++d) {
            dot += q[((b * s.T + t) * s.Hq + h) * s.D + d] *
                   k[((b * s.T + u) * s.Hkv + h / G) * s.D + d];
          }
          scores[u] = dot * scale;
          if (s.softcap > 0) scores[u] = s.softcap * std::tanh(scores[u] / s.softcap);
          max_score = std::max(max_score, scores[u]);
        }
        double sum = 0;
        for (int64_t u = u0; u <= t; ++u) sum += std::exp(scores[u] - max_score);
        lse[(b * s.Hq + h) * s.T + t] = static_cast<float>(max_score + std::log(sum));
      }
    }
  }
  return lse;
}

// Attention sums many products: compare error norms (tolerance.h). A reference that is exactly
// zero (dq and dk when T = 1: a single visible key leaves the softmax nothing to differentiate)
// admits no relative bound, so it is checked elementwise against the table's atol instead.
::testing::AssertionResult sums_close(const std::vector<float>& got, const std::vector<float>& want,
                                      DType dtype) {
  const bool all_zero = std::all_of(want.begin(), want.end(), [](float x) { return x == 0.0f; });
  if (all_zero) return all_close(got, want, tolerance_for(dtype));
  return norm_close(got, want, norm_rtol_for(dtype));
}

// One problem in storage type T: rounded inputs, and the CPU twin's forward (out, att) computed in
// double on exactly those values.
template <typename T>
struct AttnCase {
  explicit AttnCase(const AttnShape& shape) : s(shape) {
    q = rounded<T>(to_float(random_vector(s.q_numel(), 1, -2, 2)));
    k = rounded<T>(to_float(random_vector(s.kv_numel(), 2, -2, 2)));
    v = rounded<T>(to_float(random_vector(s.kv_numel(), 3)));
    dout = rounded<T>(to_float(random_vector(s.q_numel(), 4)));
    q_d = to_double(q);
    k_d = to_double(k);
    v_d = to_double(v);
    out_d.assign(s.q_numel(), 0.0);
    att_d.assign(s.B * s.Hq * s.T * s.T, 0.0);
    cpu::attention_forward(out_d.data(), att_d.data(), q_d.data(), k_d.data(), v_d.data(), s.B, s.T,
                           s.Hq, s.Hkv, s.D, s.W, s.divisor, s.softcap);
  }

  // The CPU twin's backward, accumulating into the given starting gradients.
  void reference_backward(std::vector<float>& dq, std::vector<float>& dk,
                          std::vector<float>& dv) const {
    auto dq_d = to_double(dq), dk_d = to_double(dk), dv_d = to_double(dv);
    const auto dout_d = to_double(dout);
    cpu::attention_backward(dq_d.data(), dk_d.data(), dv_d.data(), dout_d.data(), att_d.data(),
                            q_d.data(), k_d.data(), v_d.data(), s.B, s.T, s.Hq, s.Hkv, s.D,
                            s.divisor, s.softcap);
    dq = to_f32(dq_d);
    dk = to_f32(dk_d);
    dv = to_f32(dv_d);
  }

  AttnShape s;
  std::vector<float> q, k, v, dout;  // values representable in T
  std::vector<double> q_d, k_d, v_d, out_d, att_d;
};

// Device buffers for one forward + backward, gradients starting from the given values.
template <typename T>
struct DeviceAttn {
  DeviceAttn(const AttnCase<T>& c, const std::vector<float>& dq0, const std::vector<float>& dk0,
             const std::vector<float>& dv0)
      : q(to_storage<T>(c.q)),
        k(to_storage<T>(c.k)),
        v(to_storage<T>(c.v)),
        dout(to_storage<T>(c.dout)),
        out(c.s.q_numel()),
        lse(c.s.lse_numel()),
        dq(to_storage<T>(dq0)),
        dk(to_storage<T>(dk0)),
        dv(to_storage<T>(dv0)),
        scratch(cuda::attention_backward_scratch_bytes(c.s.B, c.s.T, c.s.Hq, c.s.Hkv, c.s.D)) {}

  void forward(const AttnShape& s, cudaStream_t stream) {
    cuda::attention_forward<T>(out.get(), lse.get(), q.get(), k.get(), v.get(), s.B, s.T, s.Hq,
                               s.Hkv, s.D, stream, s.W, s.divisor, s.softcap);
  }
  void backward(const AttnShape& s, cudaStream_t stream) {
    cuda::attention_backward<T>(dq.get(), dk.get(), dv.get(), dout.get(), out.get(), lse.get(),
                                q.get(), k.get(), v.get(), s.B, s.T, s.Hq, s.Hkv, s.D,
                                scratch.get(), stream, s.W, s.divisor, s.softcap);
  }

  DeviceArray<T> q, k, v, dout, out;
  DeviceArray<float> lse;
  DeviceArray<T> dq, dk, dv;
  DeviceArray<unsigned char> scratch;
};

template <typename T>
void check_forward(const AttnShape& s) {
  const AttnCase<T> c(s);
  DeviceAttn<T> dev(c, std::vector<float>(s.q_numel()), std::vector<float>(s.kv_numel()),
                    std::vector<float>(s.kv_numel()));
  zero::cuda::CudaStream stream;
  // Why: uploads ran on the legacy stream, which the non-blocking test stream does not wait for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dev.forward(s, stream);
  EXPECT_TRUE(norm_close(dev.out.download_f32(), to_f32(c.out_d), norm_rtol_for(dtype_of<T>())));
  // lse is an fp32 output computed in fp32 from exactly known inputs, whatever T is.
  EXPECT_TRUE(
      all_close(dev.lse.download(), reference_lse(c.q_d, c.k_d, s), tolerance_for(DType::kF32)));
}

// `init_scale` > 0 starts the gradients from random values of about the gradients' own size, to
// test that the kernels accumulate (read-add-write) rather than overwrite.
template <typename T>
void check_backward(const AttnShape& s, double init_scale) {
  const AttnCase<T> c(s);
  std::vector<float> dq0(s.q_numel()), dk0(s.kv_numel()), dv0(s.kv_numel());
  if (init_scale > 0) {
    dq0 = rounded<T>(to_float(random_vector(s.q_numel(), 5, -init_scale, init_scale)));
    dk0 = rounded<T>(to_float(random_vector(s.kv_numel(), 6, -init_scale, init_scale)));
    dv0 = rounded<T>(to_float(random_vector(s.kv_numel(), 7, -init_scale, init_scale)));
  }
  auto want_dq = dq0, want_dk = dk0, want_dv = dv0;
  c.reference_backward(want_dq, want_dk, want_dv);

  DeviceAttn<T> dev(c, dq0, dk0, dv0);
  zero::cuda::CudaStream stream;
  // Why: uploads ran on the legacy stream, which the non-blocking test stream does not wait for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  dev.forward(s, stream);
  dev.backward(s, stream);
  const DType dtype = dtype_of<T>();
  EXPECT_TRUE(sums_close(dev.dq.download_f32(), want_dq, dtype)) << "dq";
  EXPECT_TRUE(sums_close(dev.dk.download_f32(), want_dk, dtype)) << "dk";
  EXPECT_TRUE(sums_close(dev.dv.download_f32(), want_dv, dtype)) << "dv";
}

// The header promises bitwise reproducibility (no atomics): two runs give identical bits.
template <typename T>
void check_deterministic(const AttnShape& s) {
  const AttnCase<T> c(s);
  const std::vector<float> zq(s.q_numel()), zkv(s.kv_numel());
  DeviceAttn<T> run1(c, zq, zkv, zkv), run2(c, zq, zkv, zkv);
  zero::cuda::CudaStream stream;
  // Why: uploads ran on the legacy stream, which the non-blocking test stream does not wait for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (DeviceAttn<T>* run : {&run1, &run2}) {
    run->forward(s, stream);
    run->backward(s, stream);
  }
  EXPECT_EQ(run1.out.download_f32(), run2.out.download_f32());
  EXPECT_EQ(run1.lse.download(), run2.lse.download());
  EXPECT_EQ(run1.dq.download_f32(), run2.dq.download_f32());
  EXPECT_EQ(run1.dk.download_f32(), run2.dk.download_f32());
  EXPECT_EQ(run1.dv.download_f32(), run2.dv.download_f32());
}

#define ZERO_DISPATCH_DTYPE(dtype, fn, ...)                   \
  switch (dtype) {                                            \
    case DType::kF32: fn<float>(__VA_ARGS__); break;          \
    case DType::kBF16: fn<__nv_bfloat16>(__VA_ARGS__); break; \
    case DType::kF16: fn<__half>(__VA_ARGS__); break;         \
  }

using AttnParam = std::tuple<DType, AttnShape>;

class AttentionCuda : public ::testing::TestWithParam<AttnParam> {};

TEST_P(AttentionCuda, ForwardMatchesCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto& [dtype, shape] = GetParam();
  ZERO_DISPATCH_DTYPE(dtype, check_forward, shape);
}

TEST_P(AttentionCuda, BackwardMatchesCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto& [dtype, shape] = GetParam();
  ZERO_DISPATCH_DTYPE(dtype, check_backward, shape, /*init_scale=*/0.0);
}

TEST_P(AttentionCuda, BackwardAccumulatesIntoGradients) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto& [dtype, shape] = GetParam();
  ZERO_DISPATCH_DTYPE(dtype, check_backward, shape, /*init_scale=*/0.25);
}

TEST_P(AttentionCuda, Deterministic) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto& [dtype, shape] = GetParam();
  ZERO_DISPATCH_DTYPE(dtype, check_deterministic, shape);
}

// (B, T, Hq, Hkv, D): T = 1, primes, T over several tiles (100, 257); MHA and GQA with groups of
// 2 and 4; D = 1 and 3 (one column of a 32 bucket), 8 and 16 (tiny test models), 64 (GPT-2), 80
// and 96 (padded 128 bucket), 128 (Llama), 200 and 256 (the 256 bucket, padded and exact).
const std::vector<AttnShape> kShapes = testing::gpu_or_emulated<AttnShape>(
    {
        {1, 1, 1, 1, 1},
        {1, 1, 2, 1, 64},
        {2, 3, 1, 1, 1},
        {1, 29, 1, 1, 3},
        {1, 37, 1, 1, 8},
        {2, 37, 4, 4, 16},
        {1, 37, 4, 2, 64},
        {2, 37, 4, 1, 80},
        {1, 64, 2, 2, 128},
        {1, 100, 3, 1, 32},
        {1, 70, 2, 2, 96},
        {1, 45, 2, 1, 256},
        {1, 33, 4, 2, 200},
        {1, 257, 2, 1, 64},
        {3, 17, 6, 3, 128},
        // Sliding window (within a tile, across tiles, window 1) and an extra score divisor.
        {1, 37, 4, 2, 64, 7},
        {2, 70, 2, 1, 32, 33, 2.0},
        {1, 100, 3, 1, 128, 1},
        {1, 45, 2, 2, 16, 0, 3.0},
        // Gemma 2's soft-capped scores (caps near the scores' size, so tanh bends them): GQA with
        // a window across tiles and a divisor, plain causal over several tiles, D = 256.
        {2, 70, 4, 2, 16, 33, 2.0, 1.5},
        {1, 100, 2, 1, 80, 0, 1.0, 1.0},
        {1, 45, 2, 1, 256, 9, 1.0, 2.0},
    },
    // The emulator's (attention is its slowest kernel: four shapes): one element; a sliding
    // window with a divisor across two key tiles of 32; GQA with D = 256, past 48 KiB of shared
    // memory (one tile: D = 256 costs the emulator the most); soft-capped scores with GQA, a
    // window and a divisor across two key tiles.
    {
        {1, 1, 1, 1, 1},
        {1, 37, 1, 1, 3, 7, 2.0},
        {1, 17, 2, 1, 256},
        {1, 37, 2, 1, 16, 7, 2.0, 1.5},
    });

std::string param_name(const ::testing::TestParamInfo<AttnParam>& info) {
  const auto& [dtype, s] = info.param;
  return std::string(dtype_name(dtype)) + "_B" + std::to_string(s.B) + "_T" + std::to_string(s.T) +
         "_Hq" + std::to_string(s.Hq) + "_Hkv" + std::to_string(s.Hkv) + "_D" +
         std::to_string(s.D) + "_W" + std::to_string(s.W) + "_div" +
         std::to_string(static_cast<int>(s.divisor)) + "_cap" +
         std::to_string(static_cast<int>(s.softcap * 10));
}

INSTANTIATE_TEST_SUITE_P(DtypesShapes, AttentionCuda,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16,
                                                              DType::kF16),
                                            ::testing::ValuesIn(kShapes)),
                         param_name);

// 16-bit inputs at D = 64 and 128 take the tensor-core forward, and at D = 64 the tensor-core
// backward (mma.sync; on the emulator its shuffle twin in mma.cuh). The GPU runs them through
// every shape above too; these add several 64-row tiles with GQA, windows that start mid-tile, a
// divisor and soft-capped scores.
const std::vector<AttnShape> kTensorCoreShapes = testing::gpu_or_emulated<AttnShape>(
    {
        {1, 257, 4, 2, 64},
        {2, 130, 2, 2, 128, 40},
        {1, 200, 6, 3, 64, 65, 2.0},
        {1, 64, 1, 1, 128},
        {1, 200, 4, 2, 64, 65, 1.0, 1.0},
        {1, 130, 2, 1, 128, 0, 1.0, 1.5},
    },
    {
        {1, 20, 2, 1, 64, 9}, {1, 20, 2, 1, 64, 9, 1.0, 1.0},  // soft-capped
    });

class AttentionCudaTensorCores : public ::testing::TestWithParam<AttnParam> {};

TEST_P(AttentionCudaTensorCores, ForwardMatchesCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto& [dtype, shape] = GetParam();
  ZERO_DISPATCH_DTYPE(dtype, check_forward, shape);
}

TEST_P(AttentionCudaTensorCores, BackwardAccumulatesIntoGradients) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto& [dtype, shape] = GetParam();
  ZERO_DISPATCH_DTYPE(dtype, check_backward, shape, /*init_scale=*/0.25);
}

INSTANTIATE_TEST_SUITE_P(Dtypes16Shapes, AttentionCudaTensorCores,
                         ::testing::Combine(::testing::Values(DType::kBF16, DType::kF16),
                                            ::testing::ValuesIn(kTensorCoreShapes)),
                         param_name);

TEST(AttentionCudaScratch, HoldsOneFloatPerQueryRow) {
  EXPECT_EQ(cuda::attention_backward_scratch_bytes(2, 37, 4, 2, 64), size_t{2 * 4 * 37 * 4});
  EXPECT_EQ(cuda::attention_backward_scratch_bytes(0, 37, 4, 2, 64), size_t{0});
}

}  // namespace
}  // namespace zero::kernels
