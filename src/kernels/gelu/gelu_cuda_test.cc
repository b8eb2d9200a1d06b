// Tests for the CUDA GELU against its CPU twin (gelu.h) over dtypes x odd sizes x aligned /
// misaligned pointers, with the central tolerance table; the host test checks, without a GPU, that
// the scalar formula the kernels run (gelu_math.h) is the CPU twin's.
#include "kernels/gelu/gelu_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/cuda_stream.h"
#include "core/dtype.h"
#include "kernels/cuda_test_util.h"
#include "kernels/gelu/gelu.h"
#include "kernels/gelu/gelu_math.h"
#include "kernels/grad_check.h"
#include "kernels/tolerance.h"

namespace zero::kernels {
namespace {

using testing::all_close;
using testing::DeviceArray;
using testing::random_vector;
using testing::rounded;
using testing::to_float;
using testing::to_storage;

// Calls f.template operator()<T>() with the CUDA storage type of `dtype`.
template <typename F>
void with_storage_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: f.template operator()<float>(); break;
    case DType::kBF16: f.template operator()<__nv_bfloat16>(); break;
    case DType::kF16: f.template operator()<__half>(); break;
  }
}

std::vector<float> tail(const std::vector<float>& v, int64_t offset) {
  return std::vector<float>(v.begin() + offset, v.end());
}

TEST(GeluMath, KernelFormulaMatchesCpuTwinOnHost) {
  const int64_t n = 4001;
  std::vector<float> x(n), got(n), got_grad(n), dout(n, 1.0f);
  for (int64_t i = 0; i < n; ++i) x[i] = -8.0f + 16.0f * static_cast<float>(i) / (n - 1);
  for (int64_t i = 0; i < n; ++i) {
    got[i] = math::gelu_tanh(x[i]);
    got_grad[i] = math::gelu_tanh_grad(x[i]);
  }
  std::vector<float> want(n), want_grad(n, 0.0f);
  cpu::gelu_forward(want.data(), x.data(), n);
  cpu::gelu_backward(want_grad.data(), x.data(), dout.data(), n);
  EXPECT_TRUE(all_close(got, want, tolerance_for(DType::kF32)));
  EXPECT_TRUE(all_close(got_grad, want_grad, tolerance_for(DType::kF32)));
}

using Param = std::tuple<DType, int64_t, int64_t>;  // storage dtype, n, pointer offset

class GeluCudaTest : public ::testing::TestWithParam<Param> {};

// Arrays hold offset + n elements and the kernels see the last n (offset 1 misaligns the pointers
// for vector accesses, exercising the element-by-element path).
TEST_P(GeluCudaTest, ForwardMatchesCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const DType dtype = std::get<0>(GetParam());
  const int64_t n = std::get<1>(GetParam()), offset = std::get<2>(GetParam());
  with_storage_type(dtype, [&]<typename T>() {
    const int64_t total = offset + n;
    const auto inp = rounded<T>(to_float(random_vector(total, 1, -5.0, 5.0)));
    std::vector<float> want(n);
    cpu::gelu_forward(want.data(), inp.data() + offset, n);

    DeviceArray<T> d_inp(to_storage<T>(inp));
    DeviceArray<T> d_out(to_storage<T>(to_float(random_vector(total, 2))));  // overwritten
    zero::cuda::CudaStream stream;
    cuda::gelu_forward(d_out.get() + offset, d_inp.get() + offset, n, stream);
    EXPECT_TRUE(all_close(tail(d_out.download_f32(), offset), want, tolerance_for(dtype)));
    cuda::gelu_forward(d_inp.get() + offset, d_inp.get() + offset, n, stream);  // in place
    EXPECT_TRUE(all_close(tail(d_inp.download_f32(), offset), want, tolerance_for(dtype)));
  });
}

TEST_P(GeluCudaTest, BackwardAccumulatesLikeCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const DType dtype = std::get<0>(GetParam());
  const int64_t n = std::get<1>(GetParam()), offset = std::get<2>(GetParam());
  with_storage_type(dtype, [&]<typename T>() {
    const int64_t total = offset + n;
    const auto inp = rounded<T>(to_float(random_vector(total, 3, -5.0, 5.0)));
    const auto dout = rounded<T>(to_float(random_vector(total, 4)));
    const auto dinp0 = rounded<T>(to_float(random_vector(total, 5)));
    std::vector<float> want(dinp0.begin() + offset, dinp0.end());
    cpu::gelu_backward(want.data(), inp.data() + offset, dout.data() + offset, n);

    DeviceArray<T> d_inp(to_storage<T>(inp)), d_dout(to_storage<T>(dout)),
        d_dinp(to_storage<T>(dinp0));
    zero::cuda::CudaStream stream;
    cuda::gelu_backward(d_dinp.get() + offset, d_inp.get() + offset, d_dout.get() + offset, n,
                        stream);
    EXPECT_TRUE(all_close(tail(d_dinp.download_f32(), offset), want, tolerance_for(dtype)));
  });
}

INSTANTIATE_TEST_SUITE_P(
    DtypesOddSizes, GeluCudaTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                       ::testing::ValuesIn(testing::gpu_or_emulated<int64_t>(
                           {1, 3, 7, 31, 127, 257, 1031, 100003}, {1, 3, 7, 31, 127, 257, 1031})),
                       ::testing::Values(0, 1)),
    [](const ::testing::TestParamInfo<Param>& info) {
      return std::string(dtype_name(std::get<0>(info.param))) + "_n" +
             std::to_string(std::get<1>(info.param)) + "_off" +
             std::to_string(std::get<2>(info.param));
    });

// The 16-bit copy the CUDA model's next GEMM reads (Rounded16: the flat (rows, width) output
// with rows padded to 8 elements), written in the same pass: the fp32 output bitwise the launch
// without it, the copy its rounding to bf16 / fp16, the padding untouched (width 20: padded rows
// and packs that straddle them; 64: dense).
TEST(GeluCuda, Rounded16CopyIsTheRoundedOutput) {
  ZERO_SKIP_WITHOUT_GPU();
  zero::cuda::CudaStream stream;
  testing::for_each_copy16_case([&](int64_t rows, int64_t width, int64_t ld, bool bf16) {
    const int64_t n = rows * width;
    DeviceArray<float> inp(to_float(random_vector(n, 1, -4.0, 4.0))), plain(n), out(n);
    DeviceArray<uint16_t> copy(std::vector<uint16_t>(rows * ld, testing::kCopy16Pad));
    cuda::gelu_forward<float>(plain.get(), inp.get(), n, stream);
    cuda::gelu_forward<float>(out.get(), inp.get(), n, stream,
                              {.data = copy.get(), .bf16 = bf16, .ld = ld, .width = width});
    const std::vector<float> got = out.download();
    EXPECT_EQ(got, plain.download());
    EXPECT_TRUE(testing::copy16_is_rounded(copy.download(), ld, got, rows, width, bf16));
  });
}

}  // namespace
}  // namespace zero::kernels
