// Tests for the CUDA SwiGLU against its CPU twin (swiglu.h) over dtypes x odd sizes x aligned /
// misaligned pointers, with the central tolerance table; the host test checks, without a GPU, that
// the scalar formulas the kernels run (swiglu_math.h) are the CPU twin's.
#include "kernels/swiglu/swiglu_cuda.h"

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
#include "kernels/grad_check.h"
#include "kernels/swiglu/swiglu.h"
#include "kernels/swiglu/swiglu_math.h"
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

TEST(SwigluMath, KernelFormulasMatchCpuTwinOnHost) {
  const int64_t n = 4001;
  const auto gate = to_float(random_vector(n, 1, -12.0, 12.0));
  const auto up = to_float(random_vector(n, 2)), dout = to_float(random_vector(n, 3));
  std::vector<float> got(n), got_dgate(n), got_dup(n);
  for (int64_t i = 0; i < n; ++i) {
    got[i] = math::swiglu(gate[i], up[i]);
    const math::SwigluGrad g = math::swiglu_grad(gate[i], up[i], dout[i]);
    got_dgate[i] = g.dgate;
    got_dup[i] = g.dup;
  }
  std::vector<float> want(n), want_dgate(n, 0.0f), want_dup(n, 0.0f);
  cpu::swiglu_forward(want.data(), gate.data(), up.data(), n);
  cpu::swiglu_backward(want_dgate.data(), want_dup.data(), dout.data(), gate.data(), up.data(), n);
  EXPECT_TRUE(all_close(got, want, tolerance_for(DType::kF32)));
  EXPECT_TRUE(all_close(got_dgate, want_dgate, tolerance_for(DType::kF32)));
  EXPECT_TRUE(all_close(got_dup, want_dup, tolerance_for(DType::kF32)));
}

using Param = std::tuple<DType, int64_t, int64_t>;  // storage dtype, n, pointer offset

class SwigluCudaTest : public ::testing::TestWithParam<Param> {};

// Arrays hold offset + n elements and the kernels see the last n (offset 1 misaligns the pointers
// for vector accesses, exercising the element-by-element path).
TEST_P(SwigluCudaTest, ForwardMatchesCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const DType dtype = std::get<0>(GetParam());
  const int64_t n = std::get<1>(GetParam()), offset = std::get<2>(GetParam());
  with_storage_type(dtype, [&]<typename T>() {
    const int64_t total = offset + n;
    const auto gate = rounded<T>(to_float(random_vector(total, 4, -6.0, 6.0)));
    const auto up = rounded<T>(to_float(random_vector(total, 5)));
    std::vector<float> want(n);
    cpu::swiglu_forward(want.data(), gate.data() + offset, up.data() + offset, n);

    DeviceArray<T> d_gate(to_storage<T>(gate)), d_up(to_storage<T>(up));
    DeviceArray<T> d_out(to_storage<T>(to_float(random_vector(total, 6))));  // overwritten
    zero::cuda::CudaStream stream;
    cuda::swiglu_forward(d_out.get() + offset, d_gate.get() + offset, d_up.get() + offset, n,
                         stream);
    EXPECT_TRUE(all_close(tail(d_out.download_f32(), offset), want, tolerance_for(dtype)));
  });
}

TEST_P(SwigluCudaTest, BackwardAccumulatesLikeCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const DType dtype = std::get<0>(GetParam());
  const int64_t n = std::get<1>(GetParam()), offset = std::get<2>(GetParam());
  with_storage_type(dtype, [&]<typename T>() {
    const int64_t total = offset + n;
    const auto gate = rounded<T>(to_float(random_vector(total, 7, -6.0, 6.0)));
    const auto up = rounded<T>(to_float(random_vector(total, 8)));
    const auto dout = rounded<T>(to_float(random_vector(total, 9)));
    const auto dgate0 = rounded<T>(to_float(random_vector(total, 10)));
    const auto dup0 = rounded<T>(to_float(random_vector(total, 11)));
    std::vector<float> want_dgate(dgate0.begin() + offset, dgate0.end());
    std::vector<float> want_dup(dup0.begin() + offset, dup0.end());
    cpu::swiglu_backward(want_dgate.data(), want_dup.data(), dout.data() + offset,
                         gate.data() + offset, up.data() + offset, n);

    DeviceArray<T> d_gate(to_storage<T>(gate)), d_up(to_storage<T>(up)),
        d_dout(to_storage<T>(dout)), d_dgate(to_storage<T>(dgate0)), d_dup(to_storage<T>(dup0));
    zero::cuda::CudaStream stream;
    cuda::swiglu_backward(d_dgate.get() + offset, d_dup.get() + offset, d_dout.get() + offset,
                          d_gate.get() + offset, d_up.get() + offset, n, stream);
    EXPECT_TRUE(all_close(tail(d_dgate.download_f32(), offset), want_dgate, tolerance_for(dtype)));
    EXPECT_TRUE(all_close(tail(d_dup.download_f32(), offset), want_dup, tolerance_for(dtype)));
  });
}

INSTANTIATE_TEST_SUITE_P(
    DtypesOddSizes, SwigluCudaTest,
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
TEST(SwigluCuda, Rounded16CopyIsTheRoundedOutput) {
  ZERO_SKIP_WITHOUT_GPU();
  zero::cuda::CudaStream stream;
  testing::for_each_copy16_case([&](int64_t rows, int64_t width, int64_t ld, bool bf16) {
    const int64_t n = rows * width;
    DeviceArray<float> gate(to_float(random_vector(n, 1, -4.0, 4.0))),
        up(to_float(random_vector(n, 2, -2.0, 2.0))), plain(n), out(n);
    DeviceArray<uint16_t> copy(std::vector<uint16_t>(rows * ld, testing::kCopy16Pad));
    cuda::swiglu_forward<float>(plain.get(), gate.get(), up.get(), n, stream);
    cuda::swiglu_forward<float>(out.get(), gate.get(), up.get(), n, stream,
                                {.data = copy.get(), .bf16 = bf16, .ld = ld, .width = width});
    const std::vector<float> got = out.download();
    EXPECT_EQ(got, plain.download());
    EXPECT_TRUE(testing::copy16_is_rounded(copy.download(), ld, got, rows, width, bf16));
  });
}

}  // namespace
}  // namespace zero::kernels
