// Tests for the CUDA sum of squares against its CPU twin (norm.h) over input dtypes x sizes (0, 1,
// primes, around the CPU's chunk size, 10^6 + 3), aligned and misaligned: the value, the
// non-finite flag (inf, -inf, NaN anywhere), accumulation into device totals across calls, and
// bitwise repeatability.
#include "kernels/norm/norm_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/cuda_stream.h"
#include "core/dtype.h"
#include "kernels/cuda_test_util.h"
#include "kernels/grad_check.h"
#include "kernels/norm/norm.h"
#include "kernels/tolerance.h"

namespace zero::kernels {
namespace {

using testing::DeviceArray;
using testing::random_vector;
using testing::rounded;
using testing::to_float;
using testing::to_storage;

// Both sides square exactly the same values in fp64 and sum in fp64 (only the order differs, an
// error near 1e-15): the table's fp32 row is a loose but honest bound (it has no fp64 row).
constexpr Tolerance kTol = tolerance_for(DType::kF32);

// Calls f.template operator()<T>() with the CUDA storage type of `dtype`.
template <typename F>
void with_storage_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: f.template operator()<float>(); break;
    case DType::kBF16: f.template operator()<__nv_bfloat16>(); break;
    case DType::kF16: f.template operator()<__half>(); break;
  }
}

::testing::AssertionResult sum_close(double got, double want) {
  if (std::fabs(got - want) <= kTol.atol + kTol.rtol * std::fabs(want)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "sum of squares " << got << " != " << want;
}

// Device totals and scratch for one sequence of calls.
struct Totals {
  explicit Totals(int64_t n) : scratch(cuda::sum_squares_scratch_bytes(n)) {}
  DeviceArray<double> sum_sq{1};
  DeviceArray<int> nonfinite{1};
  DeviceArray<uint8_t> scratch;
  double sum() const { return sum_sq.download()[0]; }
  int flag() const { return nonfinite.download()[0]; }
};

// Storage dtype, n, element offset (1 misaligns the data for vector loads).
using Param = std::tuple<DType, int64_t, int64_t>;

class SumSquaresCudaTest : public ::testing::TestWithParam<Param> {};

TEST_P(SumSquaresCudaTest, MatchesCpuAndAccumulates) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto [dtype, n, offset] = GetParam();
  with_storage_type(dtype, [&, n = n, offset = offset]<typename T>() {
    const auto x = rounded<T>(to_float(random_vector(offset + n, 1, -3.0, 3.0)));
    const auto y = rounded<T>(to_float(random_vector(n, 2, -100.0, 100.0)));
    const cpu::SumSquares want_x = cpu::sum_squares(x.data() + offset, n);
    const cpu::SumSquares want_y = cpu::sum_squares(y.data(), n);
    DeviceArray<T> d_x(to_storage<T>(x)), d_y(to_storage<T>(y));
    Totals totals(n);
    const double start = 0.5;  // the totals accumulate onto what is there
    totals.sum_sq.upload({start});
    zero::cuda::CudaStream stream;
    cuda::sum_squares_accumulate(d_x.get() + offset, n, totals.sum_sq.get(), totals.nonfinite.get(),
                                 totals.scratch.get(), totals.scratch.size(), stream);
    EXPECT_TRUE(sum_close(totals.sum(), start + want_x.sum_sq));
    // Chained without a host sync in between: the second buffer adds onto the first.
    cuda::sum_squares_accumulate(d_y.get(), n, totals.sum_sq.get(), totals.nonfinite.get(),
                                 totals.scratch.get(), totals.scratch.size(), stream);
    EXPECT_TRUE(sum_close(totals.sum(), start + want_x.sum_sq + want_y.sum_sq));
    EXPECT_EQ(totals.flag(), 0);
  });
}

TEST_P(SumSquaresCudaTest, FlagsNonFiniteAnywhere) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto [dtype, n, offset] = GetParam();
  if (n == 0) GTEST_SKIP() << "nothing to flag";
  with_storage_type(dtype, [&, n = n, offset = offset]<typename T>() {
    const float specials[] = {std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              std::numeric_limits<float>::quiet_NaN()};
    zero::cuda::CudaStream stream;
    for (float special : specials) {
      for (int64_t pos : {int64_t{0}, n / 2, n - 1}) {
        auto x = rounded<T>(to_float(random_vector(offset + n, 3)));
        x[offset + pos] = special;
        DeviceArray<T> d_x(to_storage<T>(x));
        Totals totals(n);
        cuda::sum_squares_accumulate(d_x.get() + offset, n, totals.sum_sq.get(),
                                     totals.nonfinite.get(), totals.scratch.get(),
                                     totals.scratch.size(), stream);
        EXPECT_EQ(totals.flag(), 1) << special << " at " << pos;
        EXPECT_TRUE(cpu::sum_squares(x.data() + offset, n).nonfinite);
      }
    }
  });
}

TEST_P(SumSquaresCudaTest, BitwiseRepeatable) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto [dtype, n, offset] = GetParam();
  with_storage_type(dtype, [&, n = n, offset = offset]<typename T>() {
    DeviceArray<T> d_x(to_storage<T>(to_float(random_vector(offset + n, 4, -100.0, 100.0))));
    zero::cuda::CudaStream stream;
    std::vector<double> sums;
    for (int run = 0; run < 2; ++run) {
      Totals totals(n);
      cuda::sum_squares_accumulate(d_x.get() + offset, n, totals.sum_sq.get(),
                                   totals.nonfinite.get(), totals.scratch.get(),
                                   totals.scratch.size(), stream);
      sums.push_back(totals.sum());
    }
    EXPECT_EQ(sums[0], sums[1]);  // finite: == is bitwise here
  });
}

INSTANTIATE_TEST_SUITE_P(DtypesOddSizes, SumSquaresCudaTest,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16,
                                                              DType::kF16),
                                            ::testing::ValuesIn(testing::gpu_or_emulated<int64_t>(
                                                {0, 1, 7, 13, 257, 16383, 16385, 65537, 1000003},
                                                {0, 1, 7, 13, 257, 4099})),
                                            ::testing::Values(0, 1)),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_n" +
                                  std::to_string(std::get<1>(info.param)) + "_off" +
                                  std::to_string(std::get<2>(info.param));
                         });

// Large finite values do not trip the flag (squares are summed in fp64, where they cannot
// overflow), and their sum is right.
TEST(SumSquaresCuda, LargeFiniteValuesAreNotFlagged) {
  ZERO_SKIP_WITHOUT_GPU();
  const int64_t n = 1031;
  const std::vector<float> big(n, std::numeric_limits<float>::max());
  DeviceArray<float> d_big(big);
  Totals totals(n);
  zero::cuda::CudaStream stream;
  cuda::sum_squares_accumulate(d_big.get(), n, totals.sum_sq.get(), totals.nonfinite.get(),
                               totals.scratch.get(), totals.scratch.size(), stream);
  EXPECT_EQ(totals.flag(), 0);
  EXPECT_TRUE(sum_close(totals.sum(), cpu::sum_squares(big.data(), n).sum_sq));
}

}  // namespace
}  // namespace zero::kernels
