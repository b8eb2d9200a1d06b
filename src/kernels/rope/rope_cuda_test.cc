// Tests for the CUDA rope kernels against the CPU twin (rope.h) over storage dtypes x odd shapes,
// out-of-place and in place. Legend: B batch, T time, H heads, D head_dim, D2 = D/2.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/cuda_stream.h"
#include "kernels/cuda_test_util.h"
#include "kernels/grad_check.h"
#include "kernels/rope/rope.h"
#include "kernels/rope/rope_cuda.h"

namespace zero::kernels {
namespace {

using testing::all_close;
using testing::DeviceArray;
using testing::dtype_of;
using testing::random_vector;
using testing::rounded;
using testing::to_float;
using testing::to_storage;

struct RopeShape {
  int64_t B, T, H, D;
};

void PrintTo(const RopeShape& s, std::ostream* os) {
  *os << "B" << s.B << "_T" << s.T << "_H" << s.H << "_D" << s.D;
}

enum class Direction { kForward, kBackward };

// Runs one direction on the GPU (out of place or in place) and compares it with the CPU twin run in
// double on the same rounded input and the same fp32 tables.
template <typename T>
void check_rope(const RopeShape& s, Direction dir, bool in_place) {
  const int64_t numel = s.B * s.T * s.H * s.D;
  const int64_t D2 = s.D / 2;
  cpu::RopeScaling llama3;
  llama3.type = "llama3";
  llama3.factor = 8.0;
  llama3.original_max_position_embeddings = 16;  // small, so short tests cross all three bands
  const auto inv_freq = cpu::rope_inv_freq(s.D, 500000.0, llama3);
  std::vector<float> cos_TD2(s.T * D2), sin_TD2(s.T * D2);
  cpu::rope_tables(cos_TD2.data(), sin_TD2.data(), inv_freq, s.T);
  const std::vector<float> x = rounded<T>(to_float(random_vector(numel, 7, -2, 2)));

  const std::vector<double> x_d(x.begin(), x.end());
  const std::vector<double> cos_d(cos_TD2.begin(), cos_TD2.end());
  const std::vector<double> sin_d(sin_TD2.begin(), sin_TD2.end());
  std::vector<double> want_d(numel);
  if (dir == Direction::kForward) {
    cpu::rope_forward(want_d.data(), x_d.data(), cos_d.data(), sin_d.data(), s.B, s.T, s.H, s.D);
  } else {
    cpu::rope_backward(want_d.data(), x_d.data(), cos_d.data(), sin_d.data(), s.B, s.T, s.H, s.D);
  }
  const std::vector<float> want(want_d.begin(), want_d.end());

  DeviceArray<float> cos_dev(cos_TD2), sin_dev(sin_TD2);
  DeviceArray<T> x_dev(to_storage<T>(x));
  DeviceArray<T> y_dev(static_cast<size_t>(numel));
  T* out = in_place ? x_dev.get() : y_dev.get();
  zero::cuda::CudaStream stream;
  // Why: the uploads and DeviceArray's zero-fill ran on the legacy stream, which the non-blocking
  // test stream does not wait for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (dir == Direction::kForward) {
    cuda::rope_forward<T>(out, x_dev.get(), cos_dev.get(), sin_dev.get(), s.B, s.T, s.H, s.D,
                          stream);
  } else {
    cuda::rope_backward<T>(out, x_dev.get(), cos_dev.get(), sin_dev.get(), s.B, s.T, s.H, s.D,
                           stream);
  }
  const std::vector<float> got = (in_place ? x_dev : y_dev).download_f32();
  EXPECT_TRUE(all_close(got, want, tolerance_for(dtype_of<T>())));
}

// 1-element heads (D = 2), odd pair counts (D2 = 3, 5), primes for T and H, and real head dims.
const std::vector<RopeShape> kShapes = testing::gpu_or_emulated<RopeShape>(
    {
        {1, 1, 1, 2},
        {1, 7, 1, 2},
        {2, 3, 3, 6},
        {1, 37, 5, 10},
        {3, 31, 2, 16},
        {1, 127, 4, 64},
        {2, 17, 3, 128},
        {1, 1031, 1, 8},
    },
    {{1, 1, 1, 2}, {1, 7, 1, 2}, {2, 3, 3, 6}, {1, 37, 5, 10}, {2, 17, 3, 128}});

using RopeParam = std::tuple<DType, RopeShape, Direction, bool>;

class RopeCuda : public ::testing::TestWithParam<RopeParam> {};

TEST_P(RopeCuda, MatchesCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto& [dtype, shape, dir, in_place] = GetParam();
  switch (dtype) {
    case DType::kF32: check_rope<float>(shape, dir, in_place); break;
    case DType::kBF16: check_rope<__nv_bfloat16>(shape, dir, in_place); break;
    case DType::kF16: check_rope<__half>(shape, dir, in_place); break;
  }
}

// Forward then backward, both in place, is the identity (R^T R = I) up to fp32 rounding.
class RopeCudaRoundTrip : public ::testing::TestWithParam<RopeShape> {};

TEST_P(RopeCudaRoundTrip, BackwardUndoesForwardInPlace) {
  ZERO_SKIP_WITHOUT_GPU();
  const RopeShape& s = GetParam();
  const int64_t numel = s.B * s.T * s.H * s.D, D2 = s.D / 2;
  const auto inv_freq = cpu::rope_inv_freq(s.D, 10000.0, cpu::RopeScaling{});
  std::vector<float> cos_TD2(s.T * D2), sin_TD2(s.T * D2);
  cpu::rope_tables(cos_TD2.data(), sin_TD2.data(), inv_freq, s.T);
  const std::vector<float> x = to_float(random_vector(numel, 9));
  DeviceArray<float> cos_dev(cos_TD2), sin_dev(sin_TD2), x_dev(x);
  zero::cuda::CudaStream stream;
  // Why: uploads ran on the legacy stream, which the non-blocking test stream does not wait for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cuda::rope_forward<float>(x_dev.get(), x_dev.get(), cos_dev.get(), sin_dev.get(), s.B, s.T, s.H,
                            s.D, stream);
  cuda::rope_backward<float>(x_dev.get(), x_dev.get(), cos_dev.get(), sin_dev.get(), s.B, s.T, s.H,
                             s.D, stream);
  EXPECT_TRUE(all_close(x_dev.download(), x, tolerance_for(DType::kF32)));
}

std::string param_name(const ::testing::TestParamInfo<RopeParam>& info) {
  const auto& [dtype, s, dir, in_place] = info.param;
  return std::string(dtype_name(dtype)) + "_B" + std::to_string(s.B) + "_T" + std::to_string(s.T) +
         "_H" + std::to_string(s.H) + "_D" + std::to_string(s.D) +
         (dir == Direction::kForward ? "_fwd" : "_bwd") + (in_place ? "_inplace" : "");
}

INSTANTIATE_TEST_SUITE_P(
    DtypesShapes, RopeCuda,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                       ::testing::ValuesIn(kShapes),
                       ::testing::Values(Direction::kForward, Direction::kBackward),
                       ::testing::Bool()),
    param_name);
INSTANTIATE_TEST_SUITE_P(Shapes, RopeCudaRoundTrip, ::testing::ValuesIn(kShapes));

}  // namespace
}  // namespace zero::kernels
