// Tests for the CUDA Adam / AdamW against the scalar reference (adamw.h): param, exp_avg,
// exp_avg_sq and the 16-bit param copy must be BITWISE equal after several steps, for AdamW,
// Adam-L2 and no decay, with and without bias correction, on odd sizes (1, 7, 1031, 65537), aligned
// (float4 path) and misaligned (scalar path), including denormals and a squared gradient that
// overflows.
#include "kernels/adamw/adamw_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/cuda_stream.h"
#include "core/dtype.h"
#include "kernels/adamw/adamw.h"
#include "kernels/cuda_test_util.h"
#include "kernels/grad_check.h"

namespace zero::kernels {
namespace {

using testing::DeviceArray;
using testing::random_vector;
using testing::to_float;

enum class Decay { kAdamW, kAdamL2, kNone };

const char* decay_name(Decay d) {
  switch (d) {
    case Decay::kAdamW: return "adamw";
    case Decay::kAdamL2: return "adaml2";
    case Decay::kNone: return "nodecay";
  }
  return "?";
}

// Element-by-element comparison of bit patterns; reports the first few differences.
template <typename U>
::testing::AssertionResult bitwise_equal(const std::vector<U>& got, const std::vector<U>& want,
                                         const char* what) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": size " << got.size() << " != " << want.size();
  }
  int misses = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(U)) != 0) {
      if (misses < 5) {
        first += "\n  [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " +
                 std::to_string(want[i]);
      }
      ++misses;
    }
  }
  if (misses == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << misses << " of " << got.size() << " elements differ:" << first;
}

// Decay mode, bias correction, 16-bit copy dtype (kF32: no copy), numel, element offset of every
// buffer (1 misaligns them all: the scalar path).
using Param = std::tuple<Decay, bool, DType, int64_t, int64_t>;

class AdamCudaTest : public ::testing::TestWithParam<Param> {};

TEST_P(AdamCudaTest, BitwiseEqualToCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto [decay, bias_correction, copy_dtype, numel, offset] = GetParam();
  const bool with_copy = copy_dtype != DType::kF32;
  const int64_t total = offset + numel;

  AdamArgs args;
  args.lr = 3e-3f;
  args.beta1 = 0.9f;
  args.beta2 = 0.95f;
  args.eps = 1e-8f;
  args.weight_decay = decay == Decay::kNone ? 0.0f : 0.1f;
  args.adam_w_mode = decay != Decay::kAdamL2;
  args.bias_correction = bias_correction;
  const float grad_scale = 1.0f / (1024.0f * 1.7f);  // loss scale and a clipping divisor

  auto p = to_float(random_vector(total, 1));
  auto m = to_float(random_vector(total, 2, -0.1, 0.1));
  auto v = to_float(random_vector(total, 3, 0.0, 0.01));
  if (numel >= 8) {
    m[offset + 2] = v[offset + 2] = 0.0f;  // with a denormal gradient below: denormal moments
    p[offset + 3] = 1e-40f;                // a denormal param (decays stay denormal)
  }
  std::vector<uint16_t> p16(total, 0);
  DeviceArray<float> d_p(p), d_g(total), d_m(m), d_v(v);
  DeviceArray<uint16_t> d_p16(p16);
  zero::cuda::CudaStream stream;

  for (int64_t step = 1; step <= 3; ++step) {
    auto g = to_float(random_vector(total, 10 + step, -2048.0, 2048.0));
    if (numel >= 8) {
      g[offset + 1] = 0.0f;
      g[offset + 2] = 1e-39f;  // denormal after scaling
      g[offset + 4] = 1e24f;   // (g * grad_scale)^2 overflows to inf: v = inf, update 0
    }
    d_g.upload(g);
    args.step = step;

    AdamShard cpu{p.data() + offset, g.data() + offset, m.data() + offset, v.data() + offset,
                  numel};
    AdamShard dev{d_p.get() + offset, d_g.get() + offset, d_m.get() + offset, d_v.get() + offset,
                  numel};
    if (with_copy) {
      cpu.param_16bit = p16.data() + offset;
      dev.param_16bit = d_p16.get() + offset;
      cpu.param_16bit_dtype = dev.param_16bit_dtype = copy_dtype;
    }
    cpu::adam_update(args, cpu, grad_scale);
    cuda::adam_update(args, dev, grad_scale, stream);

    EXPECT_TRUE(bitwise_equal(d_p.download(), p, "param")) << "step " << step;
    EXPECT_TRUE(bitwise_equal(d_m.download(), m, "exp_avg")) << "step " << step;
    EXPECT_TRUE(bitwise_equal(d_v.download(), v, "exp_avg_sq")) << "step " << step;
    EXPECT_TRUE(bitwise_equal(d_p16.download(), p16, "param_16bit")) << "step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(
    ModesSizes, AdamCudaTest,
    ::testing::Combine(::testing::Values(Decay::kAdamW, Decay::kAdamL2, Decay::kNone),
                       ::testing::Bool(), ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                       ::testing::ValuesIn(testing::gpu_or_emulated<int64_t>({1, 7, 1031, 65537},
                                                                             {1, 7, 1031})),
                       ::testing::Values(0, 1)),
    [](const ::testing::TestParamInfo<Param>& info) {
      const DType copy_dtype = std::get<2>(info.param);
      return std::string(decay_name(std::get<0>(info.param))) +
             (std::get<1>(info.param) ? "_bc" : "_nobc") + "_copy" +
             std::string(copy_dtype == DType::kF32 ? "none" : dtype_name(copy_dtype)) + "_n" +
             std::to_string(std::get<3>(info.param)) + "_off" +
             std::to_string(std::get<4>(info.param));
    });

// A bf16 state (AdamShard's *_bf16, DeepSpeed's bf16_master_weights_and_grads with fp32 or bf16
// moments): bitwise the CPU reference's, with and without the bf16 copy, on odd sizes.
TEST(AdamCuda, Bf16StateBitwiseEqualToCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  zero::cuda::CudaStream stream;
  for (int64_t numel : testing::gpu_or_emulated<int64_t>({1, 7, 1031, 65537}, {1, 7, 1031})) {
    for (bool bf16_moments : {true, false}) {
      for (bool with_copy : {false, true}) {
        auto to_bf16_bits = [](const std::vector<float>& x) {
          std::vector<uint16_t> out;
          for (float f : x) out.push_back(float_to_bf16(f).bits);
          return out;
        };
        std::vector<uint16_t> p = to_bf16_bits(to_float(random_vector(numel, 1)));
        std::vector<float> m = to_float(random_vector(numel, 2, -0.1, 0.1));
        std::vector<float> v = to_float(random_vector(numel, 3, 0.0, 0.01));
        std::vector<uint16_t> m16 = to_bf16_bits(m), v16 = to_bf16_bits(v);
        std::vector<uint16_t> copy(numel, 0);
        DeviceArray<uint16_t> d_p(p), d_m16(m16), d_v16(v16), d_copy(copy);
        DeviceArray<float> d_g(numel), d_m(m), d_v(v);
        for (int64_t step = 1; step <= 3; ++step) {
          const auto g = to_float(random_vector(numel, 10 + step, -2048.0, 2048.0));
          d_g.upload(g);
          AdamArgs args;
          args.lr = 3e-3f;
          args.weight_decay = 0.1f;
          args.step = step;
          AdamShard cpu, dev;
          cpu.param_bf16 = reinterpret_cast<bf16*>(p.data());
          dev.param_bf16 = reinterpret_cast<bf16*>(d_p.get());
          cpu.grad = g.data();
          dev.grad = d_g.get();
          if (bf16_moments) {
            cpu.exp_avg_bf16 = reinterpret_cast<bf16*>(m16.data());
            cpu.exp_avg_sq_bf16 = reinterpret_cast<bf16*>(v16.data());
            dev.exp_avg_bf16 = reinterpret_cast<bf16*>(d_m16.get());
            dev.exp_avg_sq_bf16 = reinterpret_cast<bf16*>(d_v16.get());
          } else {
            cpu.exp_avg = m.data();
            cpu.exp_avg_sq = v.data();
            dev.exp_avg = d_m.get();
            dev.exp_avg_sq = d_v.get();
          }
          cpu.numel = dev.numel = numel;
          if (with_copy) {
            cpu.param_16bit = copy.data();
            dev.param_16bit = d_copy.get();
          }
          cpu::adam_update(args, cpu, 1.0f / 1024.0f);
          cuda::adam_update(args, dev, 1.0f / 1024.0f, stream);
          const std::string what =
              "n=" + std::to_string(numel) + " bf16_moments=" + std::to_string(bf16_moments) +
              " copy=" + std::to_string(with_copy) + " step=" + std::to_string(step);
          EXPECT_TRUE(bitwise_equal(d_p.download(), p, "param")) << what;
          if (bf16_moments) {
            EXPECT_TRUE(bitwise_equal(d_m16.download(), m16, "exp_avg")) << what;
            EXPECT_TRUE(bitwise_equal(d_v16.download(), v16, "exp_avg_sq")) << what;
          } else {
            EXPECT_TRUE(bitwise_equal(d_m.download(), m, "exp_avg")) << what;
            EXPECT_TRUE(bitwise_equal(d_v.download(), v, "exp_avg_sq")) << what;
          }
          if (with_copy) {
            EXPECT_TRUE(bitwise_equal(d_copy.download(), p, "param_16bit")) << what;
          }
        }
      }
    }
  }
}

TEST(AdamCuda, EmptyShardIsANoOp) {
  ZERO_SKIP_WITHOUT_GPU();
  zero::cuda::CudaStream stream;
  cuda::adam_update(AdamArgs{}, AdamShard{}, 1.0f, stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
}

}  // namespace
}  // namespace zero::kernels
