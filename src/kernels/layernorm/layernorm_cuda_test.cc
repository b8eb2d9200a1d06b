// Tests for the CUDA LayerNorm against its CPU twin (layernorm.h, run in double on the rounded
// inputs) over storage dtypes x odd shapes (1x1, 1xC, primes, GPT-2 / Llama widths), with and
// without bias: forward outputs and statistics, accumulating backward, bitwise repeatability.
// Legend: N rows, C channels.
#include "kernels/layernorm/layernorm_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/cuda_stream.h"
#include "core/dtype.h"
#include "kernels/cuda_test_util.h"
#include "kernels/grad_check.h"
#include "kernels/layernorm/layernorm.h"
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

struct NormShape {
  int64_t N, C;
};

void PrintTo(const NormShape& s, std::ostream* os) { *os << s.N << "x" << s.C; }

constexpr float kEps = 1e-5f;

// mean / rstd and the parameter gradients are fp32 outputs computed in fp32 from exactly the
// rounded inputs the CPU sees, whatever T is: they get the fp32 row of the table.
constexpr Tolerance kF32Tol = tolerance_for(DType::kF32);
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

std::vector<uint8_t> bytes_of(const std::vector<float>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  return {p, p + v.size() * sizeof(float)};
}

using Param = std::tuple<DType, NormShape>;

class LayernormCudaTest : public ::testing::TestWithParam<Param> {};

TEST_P(LayernormCudaTest, ForwardMatchesCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const DType dtype = std::get<0>(GetParam());
  const int64_t N = std::get<1>(GetParam()).N, C = std::get<1>(GetParam()).C;
  with_storage_type(dtype, [&]<typename T>() {
    const auto inp = rounded<T>(to_float(random_vector(N * C, 1, -2.0, 3.0)));
    const auto weight = rounded<T>(to_float(random_vector(C, 2)));
    const auto bias = rounded<T>(to_float(random_vector(C, 3)));
    const auto inp_d = to_double(inp), weight_d = to_double(weight), bias_d = to_double(bias);
    DeviceArray<T> d_inp(to_storage<T>(inp)), d_weight(to_storage<T>(weight)),
        d_bias(to_storage<T>(bias));
    zero::cuda::CudaStream stream;
    for (bool with_bias : {false, true}) {
      std::vector<double> out(N * C), mean(N), rstd(N);
      cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp_d.data(), weight_d.data(),
                             with_bias ? bias_d.data() : nullptr, N, C, double{kEps});
      // Outputs start as garbage: the forward overwrites them.
      DeviceArray<T> d_out(to_storage<T>(to_float(random_vector(N * C, 4))));
      DeviceArray<float> d_mean(to_float(random_vector(N, 5))),
          d_rstd(to_float(random_vector(N, 6)));
      cuda::layernorm_forward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_weight.get(),
                              with_bias ? d_bias.get() : nullptr, N, C, kEps, stream);
      EXPECT_TRUE(all_close(d_out.download_f32(), to_float(out), tolerance_for(dtype)))
          << "bias " << with_bias;
      EXPECT_TRUE(all_close(d_mean.download(), to_float(mean), kF32Tol));
      EXPECT_TRUE(all_close(d_rstd.download(), to_float(rstd), kF32Tol));
    }
    // Statistics are optional (inference): the output is the same without them.
    std::vector<double> out(N * C), mean(N), rstd(N);
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), inp_d.data(), weight_d.data(),
                           bias_d.data(), N, C, double{kEps});
    DeviceArray<T> d_out(N * C);
    cuda::layernorm_forward<T>(d_out.get(), nullptr, nullptr, d_inp.get(), d_weight.get(),
                               d_bias.get(), N, C, kEps, stream);
    EXPECT_TRUE(all_close(d_out.download_f32(), to_float(out), tolerance_for(dtype)));
  });
}

TEST_P(LayernormCudaTest, BackwardAccumulatesLikeCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const DType dtype = std::get<0>(GetParam());
  const int64_t N = std::get<1>(GetParam()).N, C = std::get<1>(GetParam()).C;
  with_storage_type(dtype, [&]<typename T>() {
    const auto inp = rounded<T>(to_float(random_vector(N * C, 7, -2.0, 3.0)));
    const auto weight = rounded<T>(to_float(random_vector(C, 8)));
    // Positive dout: dbias = Σ dout cannot cancel to ~0, where a relative check would be
    // meaningless (dweight still mixes signs through the normalised input).
    const auto dout = rounded<T>(to_float(random_vector(N * C, 9, 0.25, 1.0)));
    const auto dinp0 = rounded<T>(to_float(random_vector(N * C, 10)));
    const auto dweight0 = to_float(random_vector(C, 11)), dbias0 = to_float(random_vector(C, 12));

    // The statistics both sides use: the CPU forward's, rounded to the fp32 the kernel takes.
    const auto inp_d = to_double(inp), weight_d = to_double(weight);
    std::vector<double> out(N * C), mean_d(N), rstd_d(N);
    cpu::layernorm_forward(out.data(), mean_d.data(), rstd_d.data(), inp_d.data(), weight_d.data(),
                           static_cast<const double*>(nullptr), N, C, double{kEps});
    const auto mean = to_float(mean_d), rstd = to_float(rstd_d);

    DeviceArray<T> d_inp(to_storage<T>(inp)), d_weight(to_storage<T>(weight)),
        d_dout(to_storage<T>(dout));
    DeviceArray<float> d_mean(mean), d_rstd(rstd);
    DeviceArray<uint8_t> d_scratch(cuda::layernorm_backward_scratch_bytes(N, C));
    zero::cuda::CudaStream stream;
    for (bool with_bias : {false, true}) {
      auto dinp = to_double(dinp0), dweight = to_double(dweight0), dbias = to_double(dbias0);
      cpu::layernorm_backward(dinp.data(), dweight.data(), with_bias ? dbias.data() : nullptr,
                              to_double(dout).data(), inp_d.data(), weight_d.data(),
                              to_double(mean).data(), to_double(rstd).data(), N, C);

      DeviceArray<T> d_dinp(to_storage<T>(dinp0));
      DeviceArray<float> d_dweight(dweight0), d_dbias(dbias0);
      cuda::layernorm_backward(d_dinp.get(), d_dweight.get(), with_bias ? d_dbias.get() : nullptr,
                               d_dout.get(), d_inp.get(), d_weight.get(), d_mean.get(),
                               d_rstd.get(), N, C, d_scratch.get(), d_scratch.size(), stream);
      EXPECT_TRUE(all_close(d_dinp.download_f32(), to_float(dinp), tolerance_for(dtype)))
          << "bias " << with_bias;
      EXPECT_TRUE(norm_close(d_dweight.download(), to_float(dweight), kF32NormRtol));
      if (with_bias) {
        EXPECT_TRUE(norm_close(d_dbias.download(), to_float(dbias), kF32NormRtol));
      } else {
        EXPECT_EQ(d_dbias.download(), dbias0);  // untouched
      }
    }
  });
}

TEST_P(LayernormCudaTest, BackwardIsBitwiseRepeatable) {
  ZERO_SKIP_WITHOUT_GPU();
  const DType dtype = std::get<0>(GetParam());
  const int64_t N = std::get<1>(GetParam()).N, C = std::get<1>(GetParam()).C;
  with_storage_type(dtype, [&]<typename T>() {
    DeviceArray<T> d_inp(to_storage<T>(to_float(random_vector(N * C, 13, -2.0, 3.0)))),
        d_weight(to_storage<T>(to_float(random_vector(C, 14)))),
        d_dout(to_storage<T>(to_float(random_vector(N * C, 15))));
    DeviceArray<float> d_mean(N), d_rstd(N);
    DeviceArray<T> d_out(N * C);
    zero::cuda::CudaStream stream;
    cuda::layernorm_forward<T>(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(), d_weight.get(),
                               nullptr, N, C, kEps, stream);
    DeviceArray<uint8_t> d_scratch(cuda::layernorm_backward_scratch_bytes(N, C));
    std::vector<std::vector<uint8_t>> runs;
    for (int run = 0; run < 2; ++run) {
      DeviceArray<T> d_dinp(N * C);
      DeviceArray<float> d_dweight(C), d_dbias(C);
      cuda::layernorm_backward(d_dinp.get(), d_dweight.get(), d_dbias.get(), d_dout.get(),
                               d_inp.get(), d_weight.get(), d_mean.get(), d_rstd.get(), N, C,
                               d_scratch.get(), d_scratch.size(), stream);
      auto bytes = bytes_of(d_dinp.download_f32());
      for (const auto& v : {d_dweight.download(), d_dbias.download()}) {
        const auto b = bytes_of(v);
        bytes.insert(bytes.end(), b.begin(), b.end());
      }
      runs.push_back(bytes);
    }
    EXPECT_EQ(runs[0], runs[1]);
  });
}

TEST(LayernormCuda, EmptyInputIsANoOp) {
  ZERO_SKIP_WITHOUT_GPU();
  zero::cuda::CudaStream stream;
  cuda::layernorm_forward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 768, kEps,
                                 stream);
  cuda::layernorm_backward<float>(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                  nullptr, 0, 768, nullptr, 0, stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
}

INSTANTIATE_TEST_SUITE_P(
    DtypesOddShapes, LayernormCudaTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                       ::testing::Values(NormShape{1, 1}, NormShape{1, 1031}, NormShape{7, 3},
                                         NormShape{3, 7}, NormShape{31, 127}, NormShape{257, 31},
                                         NormShape{5, 768}, NormShape{2, 4096}, NormShape{1031, 13},
                                         NormShape{67, 1024})),
    [](const ::testing::TestParamInfo<Param>& info) {
      const NormShape& s = std::get<1>(info.param);
      return std::string(dtype_name(std::get<0>(info.param))) + "_" + std::to_string(s.N) + "x" +
             std::to_string(s.C);
    });

// The 16-bit copy the CUDA model's next GEMM reads (Rounded16, rows padded to 8 elements),
// written in the same pass: the fp32 output bitwise the launch without it, the copy its rounding
// to bf16 / fp16, the padding untouched (C = 20: padded rows; 64: dense).
TEST(LayernormCuda, Rounded16CopyIsTheRoundedOutput) {
  ZERO_SKIP_WITHOUT_GPU();
  zero::cuda::CudaStream stream;
  testing::for_each_copy16_case([&](int64_t N, int64_t C, int64_t ld, bool bf16) {
    DeviceArray<float> inp(to_float(random_vector(N * C, 1, -2.0, 3.0))),
        weight(to_float(random_vector(C, 2))), bias(to_float(random_vector(C, 3)));
    DeviceArray<float> plain(N * C), out(N * C);
    DeviceArray<uint16_t> copy(std::vector<uint16_t>(N * ld, testing::kCopy16Pad));
    cuda::layernorm_forward<float>(plain.get(), nullptr, nullptr, inp.get(), weight.get(),
                                   bias.get(), N, C, kEps, stream);
    cuda::layernorm_forward<float>(out.get(), nullptr, nullptr, inp.get(), weight.get(), bias.get(),
                                   N, C, kEps, stream,
                                   {.data = copy.get(), .bf16 = bf16, .ld = ld, .width = C});
    const std::vector<float> got = out.download();
    EXPECT_EQ(got, plain.download());
    EXPECT_TRUE(testing::copy16_is_rounded(copy.download(), ld, got, N, C, bf16));
  });
}

}  // namespace
}  // namespace zero::kernels
