// Tests for the CUDA embedding against its CPU twin (encoder.h, run in double on the rounded
// inputs) over storage dtypes x odd shapes, including long runs of one token id (more than 32 and
// 64 positions: the backward walks runs in warp-sized steps), with and without learned positions;
// accumulation, bitwise repeatability, and out-of-range ids. Legend: B batch, T time, C channels,
// V vocab.
#include "kernels/encoder/encoder_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/cuda_stream.h"
#include "core/dtype.h"
#include "kernels/cuda_test_util.h"
#include "kernels/encoder/encoder.h"
#include "kernels/grad_check.h"
#include "kernels/tolerance.h"

namespace zero::kernels {
namespace {

using testing::all_close;
using testing::DeviceArray;
using testing::norm_close;
using testing::random_vector;
using testing::rounded;
using testing::to_float;
using testing::to_storage;

struct EncoderShape {
  int64_t B, T, C, V;
};

void PrintTo(const EncoderShape& s, std::ostream* os) {
  *os << s.B << "x" << s.T << "x" << s.C << "_V" << s.V;
}

// dwte / dwpe are fp32 sums of exactly the rounded dout the CPU sees, whatever T is: only the
// summation order differs, so they get the fp32 row of the table.
constexpr double kF32NormRtol = norm_rtol_for(DType::kF32);

// Calls f.template operator()<T>() with the CUDA storage type of `dtype`.
template <typename F>
void with_storage_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: f.template operator()<float>(); break;
    case DType::kBF16: f.template operator()<__nv_bfloat16>(); break;
    case DType::kF16: f.template operator()<__half>(); break;
  }
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Token ids in [0, V) from a fixed seed; small V makes long runs of one id likely.
std::vector<int32_t> random_tokens(int64_t n, int64_t V, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(V - 1));
  std::vector<int32_t> tokens(n);
  for (auto& t : tokens) t = dist(rng);
  return tokens;
}

using Param = std::tuple<DType, EncoderShape>;

class EncoderCudaTest : public ::testing::TestWithParam<Param> {};

TEST_P(EncoderCudaTest, ForwardMatchesCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const DType dtype = std::get<0>(GetParam());
  const EncoderShape s = std::get<1>(GetParam());
  with_storage_type(dtype, [&]<typename T>() {
    const auto tokens = random_tokens(s.B * s.T, s.V, 1);
    const auto wte = rounded<T>(to_float(random_vector(s.V * s.C, 2)));
    const auto wpe = rounded<T>(to_float(random_vector(s.T * s.C, 3)));
    DeviceArray<int32_t> d_tokens(tokens);
    DeviceArray<T> d_wte(to_storage<T>(wte)), d_wpe(to_storage<T>(wpe));
    zero::cuda::CudaStream stream;
    for (bool with_wpe : {false, true}) {
      std::vector<double> out(s.B * s.T * s.C);
      const auto wpe_d = to_double(wpe);
      cpu::encoder_forward(out.data(), tokens.data(), to_double(wte).data(),
                           with_wpe ? wpe_d.data() : nullptr, s.B, s.T, s.C, s.V);
      // Output starts as garbage: the forward overwrites it.
      DeviceArray<T> d_out(to_storage<T>(to_float(random_vector(out.size(), 4))));
      cuda::encoder_forward(d_out.get(), d_tokens.get(), d_wte.get(),
                            with_wpe ? d_wpe.get() : nullptr, s.B, s.T, s.C, s.V, stream);
      EXPECT_TRUE(all_close(d_out.download_f32(), to_float(out), tolerance_for(dtype)))
          << "wpe " << with_wpe;
    }
  });
}

TEST_P(EncoderCudaTest, BackwardAccumulatesLikeCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const DType dtype = std::get<0>(GetParam());
  const EncoderShape s = std::get<1>(GetParam());
  with_storage_type(dtype, [&]<typename T>() {
    const auto tokens = random_tokens(s.B * s.T, s.V, 5);
    const auto dout = rounded<T>(to_float(random_vector(s.B * s.T * s.C, 6)));
    const auto dwte0 = to_float(random_vector(s.V * s.C, 7));
    const auto dwpe0 = to_float(random_vector(s.T * s.C, 8));
    DeviceArray<int32_t> d_tokens(tokens);
    DeviceArray<T> d_dout(to_storage<T>(dout));
    DeviceArray<uint8_t> d_scratch(cuda::encoder_backward_scratch_bytes(s.B, s.T, s.V));
    zero::cuda::CudaStream stream;
    for (bool with_wpe : {false, true}) {
      auto dwte = to_double(dwte0), dwpe = to_double(dwpe0);
      cpu::encoder_backward(dwte.data(), with_wpe ? dwpe.data() : nullptr, to_double(dout).data(),
                            tokens.data(), s.B, s.T, s.C, s.V);
      DeviceArray<float> d_dwte(dwte0), d_dwpe(dwpe0);
      cuda::encoder_backward(d_dwte.get(), with_wpe ? d_dwpe.get() : nullptr, d_dout.get(),
                             d_tokens.get(), s.B, s.T, s.C, s.V, d_scratch.get(), d_scratch.size(),
                             stream);
      EXPECT_TRUE(norm_close(d_dwte.download(), to_float(dwte), kF32NormRtol))
          << "wpe " << with_wpe;
      if (with_wpe) {
        EXPECT_TRUE(norm_close(d_dwpe.download(), to_float(dwpe), kF32NormRtol));
      } else {
        EXPECT_EQ(d_dwpe.download(), dwpe0);  // untouched
      }
    }
  });
}

TEST_P(EncoderCudaTest, BackwardIsBitwiseRepeatable) {
  ZERO_SKIP_WITHOUT_GPU();
  const DType dtype = std::get<0>(GetParam());
  const EncoderShape s = std::get<1>(GetParam());
  with_storage_type(dtype, [&]<typename T>() {
    DeviceArray<int32_t> d_tokens(random_tokens(s.B * s.T, s.V, 9));
    DeviceArray<T> d_dout(to_storage<T>(to_float(random_vector(s.B * s.T * s.C, 10))));
    DeviceArray<uint8_t> d_scratch(cuda::encoder_backward_scratch_bytes(s.B, s.T, s.V));
    zero::cuda::CudaStream stream;
    std::vector<std::vector<float>> runs;
    for (int run = 0; run < 2; ++run) {
      DeviceArray<float> d_dwte(s.V * s.C), d_dwpe(s.T * s.C);
      cuda::encoder_backward(d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(), s.B, s.T,
                             s.C, s.V, d_scratch.get(), d_scratch.size(), stream);
      auto result = d_dwte.download();
      const auto dwpe = d_dwpe.download();
      result.insert(result.end(), dwpe.begin(), dwpe.end());
      runs.push_back(result);
    }
    // Compare bit patterns (the values are finite, so == on floats is bitwise here).
    EXPECT_EQ(runs[0], runs[1]);
  });
}

INSTANTIATE_TEST_SUITE_P(
    DtypesOddShapes, EncoderCudaTest,
    ::testing::Combine(
        ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
        ::testing::ValuesIn(testing::gpu_or_emulated<EncoderShape>({{1, 1, 1, 1},
                                                                    {1, 7, 13, 5},
                                                                    {3, 5, 17, 3},
                                                                    {2, 3, 131, 7},
                                                                    {5, 1, 2, 11},
                                                                    {2, 33, 24, 1},
                                                                    {8, 129, 24, 3},
                                                                    {4, 64, 768, 50},
                                                                    {1, 1031, 256, 1031}},
                                                                   {{1, 1, 1, 1},
                                                                    {1, 7, 13, 5},
                                                                    {3, 5, 17, 3},
                                                                    {2, 3, 131, 7},
                                                                    {5, 1, 2, 11},
                                                                    {2, 33, 24, 1}}))),
    [](const ::testing::TestParamInfo<Param>& info) {
      const EncoderShape& s = std::get<1>(info.param);
      return std::string(dtype_name(std::get<0>(info.param))) + "_" + std::to_string(s.B) + "x" +
             std::to_string(s.T) + "x" + std::to_string(s.C) + "_V" + std::to_string(s.V);
    });

// Ids outside [0, V) are a caller bug: the forward writes NaN rows for them (no out-of-bounds
// read) and the backward leaves dwte without their contribution (no out-of-bounds write).
TEST(EncoderCuda, OutOfRangeTokensGiveNanRowsAndNoGradient) {
  ZERO_SKIP_WITHOUT_GPU();
  const int64_t B = 2, T = 5, C = 9, V = 4;
  std::vector<int32_t> tokens = {0, 3, -1, 1, 4, 2, 2, 1000000, 0, 3};
  const auto wte = to_float(random_vector(V * C, 11));
  const auto dout = to_float(random_vector(B * T * C, 12));
  DeviceArray<int32_t> d_tokens(tokens);
  DeviceArray<float> d_wte(wte), d_dout(dout), d_out(B * T * C), d_dwte(V * C);
  DeviceArray<uint8_t> d_scratch(cuda::encoder_backward_scratch_bytes(B, T, V));
  zero::cuda::CudaStream stream;
  cuda::encoder_forward<float>(d_out.get(), d_tokens.get(), d_wte.get(), nullptr, B, T, C, V,
                               stream);
  cuda::encoder_backward<float>(d_dwte.get(), nullptr, d_dout.get(), d_tokens.get(), B, T, C, V,
                                d_scratch.get(), d_scratch.size(), stream);
  const auto out = d_out.download();

  // Reference: the valid positions only (invalid ones become id 0 with a zero gradient row).
  std::vector<double> dwte(V * C), want_dout = to_double(dout);
  std::vector<int32_t> valid_tokens = tokens;
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const bool valid = tokens[bt] >= 0 && tokens[bt] < V;
    for (int64_t c = 0; c < C; ++c) {
      if (valid) {
        EXPECT_EQ(out[bt * C + c], wte[tokens[bt] * C + c]) << "bt " << bt << " c " << c;
      } else {
        EXPECT_TRUE(std::isnan(out[bt * C + c])) << "bt " << bt << " c " << c;
        want_dout[bt * C + c] = 0.0;
      }
    }
    if (!valid) valid_tokens[bt] = 0;
  }
  cpu::encoder_backward(dwte.data(), static_cast<double*>(nullptr), want_dout.data(),
                        valid_tokens.data(), B, T, C, V);
  EXPECT_TRUE(norm_close(d_dwte.download(), to_float(dwte), kF32NormRtol));
}

TEST(EncoderCuda, EmptyBatchIsANoOp) {
  ZERO_SKIP_WITHOUT_GPU();
  zero::cuda::CudaStream stream;
  EXPECT_EQ(cuda::encoder_backward_scratch_bytes(0, 1024, 50257), 0u);
  cuda::encoder_forward<float>(nullptr, nullptr, nullptr, nullptr, 0, 1024, 768, 50257, stream);
  cuda::encoder_backward<float>(nullptr, nullptr, nullptr, nullptr, 0, 1024, 768, 50257, nullptr, 0,
                                stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
}

}  // namespace
}  // namespace zero::kernels
