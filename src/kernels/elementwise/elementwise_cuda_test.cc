// Tests for the CUDA elementwise helpers against their CPU twins (elementwise.h) and core/dtype.h:
// add / accumulate / scale / accumulate_f32 are exact (one fp32 operation, one rounding to T, on
// both sides), casts are bitwise, over dtypes x odd sizes x aligned / misaligned pointers. The
// host tests check the bit-exact conversions the cast kernels run, without a GPU.
#include "kernels/elementwise/elementwise_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/cuda_stream.h"
#include "core/dtype.h"
#include "kernels/cuda_test_util.h"
#include "kernels/dtype_bits.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/grad_check.h"

namespace zero::kernels {
namespace {

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

// Exact equality of values (no NaNs expected), reporting the first few differences.
::testing::AssertionResult exactly_equal(const std::vector<float>& got,
                                         const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  int misses = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      if (misses < 5) {
        first += "\n  [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " +
                 std::to_string(want[i]);
      }
      ++misses;
    }
  }
  if (misses == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << misses << " of " << got.size() << " differ:" << first;
}

// The raw bytes of a host array (bitwise comparisons, NaN payloads included).
template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<float> tail(const std::vector<float>& v, int64_t offset) {
  return std::vector<float>(v.begin() + offset, v.end());
}

// ---- Host: the conversions the cast kernels run (dtype_bits.h) equal core/dtype.h bit for bit.

TEST(DtypeBits, SixteenBitToFloatMatchesCoreDtypeForEveryPattern) {
  for (uint32_t pattern = 0; pattern <= 0xffffu; ++pattern) {
    const auto h = static_cast<uint16_t>(pattern);
    ASSERT_EQ(float_bits(bits::bf16_bits_to_f32(h)), float_bits(bf16_to_float(bf16{h}))) << h;
    ASSERT_EQ(float_bits(bits::f16_bits_to_f32(h)), float_bits(f16_to_float(f16{h}))) << h;
  }
}

TEST(DtypeBits, FloatToSixteenBitMatchesCoreDtype) {
  auto check = [](uint32_t u) {
    const float f = bits_float(u);
    ASSERT_EQ(bits::f32_to_bf16_bits(f), float_to_bf16(f).bits) << std::hex << u;
    ASSERT_EQ(bits::f32_to_f16_bits(f), float_to_f16(f).bits) << std::hex << u;
  };
  // A stride coprime to 2^32 visits every sign and exponent with varied mantissas.
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4099) check(static_cast<uint32_t>(u));
  // Every exponent with the mantissa tails where rounding decides: ties (bf16 drops 16 bits,
  // f16 normals 13), one below and above them, all ones (carries into the exponent).
  const uint32_t low_bits[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001,
                               0x1fff, 0x7fff, 0x8000, 0x8001, 0xffff};
  const uint32_t high_bits[] = {0x000000, 0x002000, 0x010000, 0x7e0000, 0x7f0000, 0x7fe000};
  for (uint32_t sign : {0u, 0x80000000u}) {
    for (uint32_t exponent = 0; exponent < 256; ++exponent) {
      for (uint32_t hi : high_bits) {
        for (uint32_t lo : low_bits) check(sign | (exponent << 23) | hi | lo);
      }
    }
  }
}

// ---- GPU: arithmetic, exact against the CPU twin run on the T-rounded inputs.

using SizeParam = std::tuple<DType, int64_t, int64_t>;  // storage dtype, n, pointer offset

std::string size_param_name(const ::testing::TestParamInfo<SizeParam>& info) {
  const auto& [dtype, n, offset] = info.param;
  return std::string(dtype_name(dtype)) + "_n" + std::to_string(n) + "_off" +
         std::to_string(offset);
}

class ElementwiseCudaTest : public ::testing::TestWithParam<SizeParam> {};

// The element offset (1 = pointers misaligned for vector accesses) keeps the whole array in
// bounds: arrays hold offset + n elements and the kernels see the last n.
TEST_P(ElementwiseCudaTest, AddMatchesCpuExactly) {
  ZERO_SKIP_WITHOUT_GPU();
  const DType dtype = std::get<0>(GetParam());
  const int64_t n = std::get<1>(GetParam()), offset = std::get<2>(GetParam());
  with_storage_type(dtype, [&]<typename T>() {
    const int64_t total = offset + n;
    const auto a = rounded<T>(to_float(random_vector(total, 1)));
    const auto b = rounded<T>(to_float(random_vector(total, 2)));
    std::vector<float> want(n);
    cpu::add(want.data(), a.data() + offset, b.data() + offset, n);
    want = rounded<T>(want);

    DeviceArray<T> d_a(to_storage<T>(a)), d_b(to_storage<T>(b)), d_out(total);
    zero::cuda::CudaStream stream;
    cuda::add(d_out.get() + offset, d_a.get() + offset, d_b.get() + offset, n, stream);
    EXPECT_TRUE(exactly_equal(tail(d_out.download_f32(), offset), want));
    cuda::add(d_a.get() + offset, d_a.get() + offset, d_b.get() + offset, n, stream);  // in place
    EXPECT_TRUE(exactly_equal(tail(d_a.download_f32(), offset), want));
  });
}

TEST_P(ElementwiseCudaTest, AccumulateMatchesCpuExactly) {
  ZERO_SKIP_WITHOUT_GPU();
  const DType dtype = std::get<0>(GetParam());
  const int64_t n = std::get<1>(GetParam()), offset = std::get<2>(GetParam());
  with_storage_type(dtype, [&]<typename T>() {
    const int64_t total = offset + n;
    const auto acc0 = rounded<T>(to_float(random_vector(total, 3)));
    const auto x = rounded<T>(to_float(random_vector(total, 4)));
    // Two calls, each rounding to T as the kernel does.
    std::vector<float> want(acc0.begin() + offset, acc0.end());
    for (int call = 0; call < 2; ++call) {
      cpu::accumulate(want.data(), x.data() + offset, n);
      want = rounded<T>(want);
    }

    DeviceArray<T> d_acc(to_storage<T>(acc0)), d_x(to_storage<T>(x));
    zero::cuda::CudaStream stream;
    for (int call = 0; call < 2; ++call) {
      cuda::accumulate(d_acc.get() + offset, d_x.get() + offset, n, stream);
    }
    EXPECT_TRUE(exactly_equal(tail(d_acc.download_f32(), offset), want));
  });
}

TEST_P(ElementwiseCudaTest, ScaleMatchesCpuExactly) {
  ZERO_SKIP_WITHOUT_GPU();
  const DType dtype = std::get<0>(GetParam());
  const int64_t n = std::get<1>(GetParam()), offset = std::get<2>(GetParam());
  with_storage_type(dtype, [&]<typename T>() {
    const int64_t total = offset + n;
    const auto x = rounded<T>(to_float(random_vector(total, 5)));
    const float s = -1.7f;  // not representable in bf16 / fp16: the kernel must not round it
    std::vector<float> want(x.begin() + offset, x.end());
    cpu::scale(want.data(), s, n);
    want = rounded<T>(want);

    DeviceArray<T> d_x(to_storage<T>(x));
    zero::cuda::CudaStream stream;
    cuda::scale(d_x.get() + offset, s, n, stream);
    EXPECT_TRUE(exactly_equal(tail(d_x.download_f32(), offset), want));
  });
}

TEST_P(ElementwiseCudaTest, AccumulateF32MatchesCpuExactly) {
  ZERO_SKIP_WITHOUT_GPU();
  const DType dtype = std::get<0>(GetParam());
  const int64_t n = std::get<1>(GetParam()), offset = std::get<2>(GetParam());
  with_storage_type(dtype, [&]<typename T>() {
    const int64_t total = offset + n;
    const auto acc0 = to_float(random_vector(total, 6));
    const auto x = rounded<T>(to_float(random_vector(total, 7)));
    std::vector<float> want(acc0.begin() + offset, acc0.end());
    cpu::accumulate(want.data(), x.data() + offset, n);

    DeviceArray<float> d_acc(acc0);
    DeviceArray<T> d_x(to_storage<T>(x));
    zero::cuda::CudaStream stream;
    cuda::accumulate_f32(d_acc.get() + offset, d_x.get() + offset, n, stream);
    EXPECT_TRUE(exactly_equal(tail(d_acc.download_f32(), offset), want));
  });
}

INSTANTIATE_TEST_SUITE_P(
    DtypesOddSizes, ElementwiseCudaTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                       ::testing::ValuesIn(testing::gpu_or_emulated<int64_t>(
                           {1, 3, 7, 31, 127, 257, 1031, 100003}, {1, 3, 7, 31, 127, 257, 1031})),
                       ::testing::Values(0, 1)),
    size_param_name);

TEST(ElementwiseCuda, ZeroElementsLaunchNothing) {
  ZERO_SKIP_WITHOUT_GPU();
  zero::cuda::CudaStream stream;
  cuda::add<float>(nullptr, nullptr, nullptr, 0, stream);
  cuda::accumulate<__half>(nullptr, nullptr, 0, stream);
  cuda::scale<__nv_bfloat16>(nullptr, 2.0f, 0, stream);
  cuda::accumulate_f32<__half>(nullptr, nullptr, 0, stream);
  cuda::cast<float, __half>(nullptr, nullptr, 0, stream);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // why: surface any launch error here
}

// ---- GPU: casts, bitwise against core/dtype.h.

// Floats over many binades with the values where conversions go wrong mixed in: NaNs (quiet,
// signalling, negative, with payloads), infinities, signed zeros, float subnormals, values that
// become fp16 subnormals or round to zero, ties for bf16 and fp16, fp16 and bf16 overflow.
std::vector<float> float_cast_inputs(int64_t n) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 30);
  std::vector<float> v(n);
  for (auto& x : v) x = std::ldexp(mantissa(rng), exponent(rng));
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            bits_float(0xffc00000u),  // negative quiet NaN
                            bits_float(0x7f800001u),  // signalling NaN
                            bits_float(0x7fc12345u),  // NaN with payload
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            0.0f,
                            -0.0f,
                            std::numeric_limits<float>::denorm_min(),
                            -1e-40f,
                            1e-7f,
                            -3e-5f,
                            0x1p-25f,           // fp16: tie between 0 and the smallest subnormal
                            0x1.8p-24f,         // fp16: tie between subnormals 1 and 2 (-> 2)
                            0x1p-24f,           // smallest fp16 subnormal
                            6.1e-5f,            // just below the smallest fp16 normal
                            1.0f + 0x1p-8f,     // bf16 tie, rounds down to even
                            1.0f + 0x1.8p-7f,   // bf16 tie, rounds up to even
                            1.0f + 0x1p-11f,    // fp16 tie, rounds down to even
                            1.0f + 0x1.8p-10f,  // fp16 tie, rounds up to even
                            65504.0f,           // largest fp16
                            65519.99f,          // still rounds to 65504
                            -65520.0f,          // fp16 overflow to -inf
                            70000.0f,
                            1e30f,
                            std::numeric_limits<float>::max()};  // bf16 overflow to inf
  for (size_t k = 0; k < std::size(specials) && static_cast<int64_t>(k * 7) < n; ++k) {
    v[k * 7] = specials[k];
  }
  return v;
}

// The host array of Src the cast test starts from: float_cast_inputs for float, every kind of
// 16-bit pattern (NaN payloads, subnormals, infinities) for bf16 / fp16.
template <typename Src>
std::vector<Src> cast_source(int64_t n) {
  if constexpr (std::is_same_v<Src, float>) {
    return float_cast_inputs(n);
  } else {
    std::vector<uint16_t> patterns(n);
    for (int64_t i = 0; i < n; ++i) patterns[i] = static_cast<uint16_t>(i * 40503u + 17u);
    const uint16_t specials[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x7c00, 0xfc00, 0x7c01,
                                 0x7e00, 0xfe01, 0x7f80, 0xff80, 0x7f81, 0x7fc0, 0x7bff};
    for (size_t k = 0; k < std::size(specials) && static_cast<int64_t>(k * 5) < n; ++k) {
      patterns[k * 5] = specials[k];
    }
    std::vector<Src> v(n);
    std::memcpy(static_cast<void*>(v.data()), patterns.data(), n * sizeof(Src));
    return v;
  }
}

// What core/dtype.h makes of src: through float, or the same bits when the types are equal.
template <typename Src, typename Dst>
std::vector<Dst> host_cast(const std::vector<Src>& src) {
  std::vector<Dst> dst(src.size());
  if constexpr (std::is_same_v<Src, Dst>) {
    dst = src;
  } else {
    std::vector<float> f32(src.size());
    convert_to_f32(src.data(), testing::dtype_of<Src>(), f32.data(), src.size());
    convert_from_f32(f32.data(), dst.data(), testing::dtype_of<Dst>(), src.size());
  }
  return dst;
}

using CastParam = std::tuple<DType, DType, int64_t, int64_t>;  // src, dst, n, pointer offset

class CastCudaTest : public ::testing::TestWithParam<CastParam> {};

TEST_P(CastCudaTest, MatchesCoreDtypeBitwise) {
  ZERO_SKIP_WITHOUT_GPU();
  const DType src_dtype = std::get<0>(GetParam()), dst_dtype = std::get<1>(GetParam());
  const int64_t n = std::get<2>(GetParam()), offset = std::get<3>(GetParam());
  with_storage_type(src_dtype, [&]<typename Src>() {
    with_storage_type(dst_dtype, [&]<typename Dst>() {
      const std::vector<Src> src = cast_source<Src>(offset + n);
      const std::vector<Src> used(src.begin() + offset, src.end());
      DeviceArray<Src> d_src(src);
      DeviceArray<Dst> d_dst(offset + n);
      zero::cuda::CudaStream stream;
      cuda::cast(d_src.get() + offset, d_dst.get() + offset, n, stream);
      const std::vector<Dst> got = d_dst.download();
      EXPECT_EQ(bytes_of(std::vector<Dst>(got.begin() + offset, got.end())),
                bytes_of(host_cast<Src, Dst>(used)));
    });
  });
}

std::string cast_param_name(const ::testing::TestParamInfo<CastParam>& info) {
  const auto& [src, dst, n, offset] = info.param;
  return std::string(dtype_name(src)) + "_to_" + std::string(dtype_name(dst)) + "_n" +
         std::to_string(n) + "_off" + std::to_string(offset);
}

INSTANTIATE_TEST_SUITE_P(
    AllPairsOddSizes, CastCudaTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                       ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                       ::testing::ValuesIn(testing::gpu_or_emulated<int64_t>(
                           {1, 7, 31, 257, 1031, 100003}, {1, 7, 31, 257, 1031})),
                       ::testing::Values(0, 1)),
    cast_param_name);

}  // namespace
}  // namespace zero::kernels
