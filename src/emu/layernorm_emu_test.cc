// The CUDA LayerNorm (layernorm_cuda.cu) run on the CPU emulator (zero_emu_cuda's object) against
// its CPU twin (run in double on the rounded inputs), within tolerance.h: fp32 (vectorised and
// scalar paths, misaligned pointers), bf16 and fp16, small odd shapes (1x1, primes, partial last
// blocks and warps of rows). Device memory is host memory here, so the kernels get host vectors.
// Legend: N rows, C channels.
#include "emu/cuda_emu.h"
// The emulator header must come first (its cudaDeviceSynchronize waits for the queued launches).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "kernels/cuda_test_util.h"
#include "kernels/grad_check.h"
#include "kernels/layernorm/layernorm.h"
#include "kernels/layernorm/layernorm_cuda.h"
#include "kernels/tolerance.h"

namespace zero::kernels {
namespace {

using testing::all_close;
using testing::from_storage;
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
constexpr Tolerance kF32Tol = tolerance_for(DType::kF32);
constexpr double kF32NormRtol = norm_rtol_for(DType::kF32);

template <typename F>
void with_storage_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: f.template operator()<float>(); break;
    case DType::kBF16: f.template operator()<__nv_bfloat16>(); break;
    case DType::kF16: f.template operator()<__half>(); break;
  }
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// `v` copied into a buffer at element offset `offset` (1: no pointer is 16-byte aligned, so the
// launchers take the scalar kernels whatever C is).
template <typename T>
class OffsetBuffer {
 public:
  OffsetBuffer(const std::vector<T>& v, int offset) : buf_(v.size() + offset), offset_(offset) {
    std::copy(v.begin(), v.end(), buf_.begin() + offset);
  }
  T* get() { return buf_.data() + offset_; }
  std::vector<T> values() const { return {buf_.begin() + offset_, buf_.end()}; }

 private:
  std::vector<T> buf_;
  int offset_;
};

using Param = std::tuple<DType, NormShape, int>;  // dtype, shape, element offset of every pointer

class LayernormEmuTest : public ::testing::TestWithParam<Param> {};

TEST_P(LayernormEmuTest, ForwardMatchesCpu) {
  const DType dtype = std::get<0>(GetParam());
  const int64_t N = std::get<1>(GetParam()).N, C = std::get<1>(GetParam()).C;
  const int offset = std::get<2>(GetParam());
  with_storage_type(dtype, [&]<typename T>() {
    const auto inp = rounded<T>(to_float(random_vector(N * C, 1, -2.0, 3.0)));
    const auto weight = rounded<T>(to_float(random_vector(C, 2)));
    const auto bias = rounded<T>(to_float(random_vector(C, 3)));
    for (bool with_bias : {false, true}) {
      std::vector<double> out(N * C), mean(N), rstd(N);
      cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), to_double(inp).data(),
                             to_double(weight).data(), with_bias ? to_double(bias).data() : nullptr,
                             N, C, double{kEps});
      OffsetBuffer<T> e_inp(to_storage<T>(inp), offset), e_weight(to_storage<T>(weight), offset),
          e_bias(to_storage<T>(bias), offset);
      // Outputs start as garbage: the forward overwrites them.
      OffsetBuffer<T> e_out(to_storage<T>(to_float(random_vector(N * C, 4))), offset);
      std::vector<float> e_mean = to_float(random_vector(N, 5)),
                         e_rstd = to_float(random_vector(N, 6));
      cuda::layernorm_forward(e_out.get(), e_mean.data(), e_rstd.data(), e_inp.get(),
                              e_weight.get(), with_bias ? e_bias.get() : nullptr, N, C, kEps,
                              nullptr);
      // Why: the launch is queued on the legacy stream; its outputs are read below.
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_TRUE(all_close(from_storage(e_out.values()), to_float(out), tolerance_for(dtype)))
          << "bias " << with_bias;
      EXPECT_TRUE(all_close(e_mean, to_float(mean), kF32Tol));
      EXPECT_TRUE(all_close(e_rstd, to_float(rstd), kF32Tol));
    }
  });
}

TEST_P(LayernormEmuTest, BackwardAccumulatesLikeCpu) {
  const DType dtype = std::get<0>(GetParam());
  const int64_t N = std::get<1>(GetParam()).N, C = std::get<1>(GetParam()).C;
  const int offset = std::get<2>(GetParam());
  with_storage_type(dtype, [&]<typename T>() {
    const auto inp = rounded<T>(to_float(random_vector(N * C, 7, -2.0, 3.0)));
    const auto weight = rounded<T>(to_float(random_vector(C, 8)));
    // Positive dout: dbias cannot cancel to ~0, where a relative check would mean nothing.
    const auto dout = rounded<T>(to_float(random_vector(N * C, 9, 0.25, 1.0)));
    const auto dinp0 = rounded<T>(to_float(random_vector(N * C, 10)));
    const auto dweight0 = to_float(random_vector(C, 11)), dbias0 = to_float(random_vector(C, 12));

    // The statistics both sides use: the CPU forward's, rounded to the fp32 the kernel takes.
    const auto inp_d = to_double(inp), weight_d = to_double(weight);
    std::vector<double> out(N * C), mean_d(N), rstd_d(N);
    cpu::layernorm_forward(out.data(), mean_d.data(), rstd_d.data(), inp_d.data(), weight_d.data(),
                           static_cast<const double*>(nullptr), N, C, double{kEps});
    const auto mean = to_float(mean_d), rstd = to_float(rstd_d);

    OffsetBuffer<T> e_inp(to_storage<T>(inp), offset), e_weight(to_storage<T>(weight), offset),
        e_dout(to_storage<T>(dout), offset);
    std::vector<uint8_t> scratch(cuda::layernorm_backward_scratch_bytes(N, C) + sizeof(float));
    // Scratch must be 4-byte aligned; a vector of bytes is (operator new), so is data() + 4.
    void* scratch_ptr = scratch.data() + (offset != 0 ? sizeof(float) : 0);
    for (bool with_bias : {false, true}) {
      auto dinp = to_double(dinp0), dweight = to_double(dweight0), dbias = to_double(dbias0);
      cpu::layernorm_backward(dinp.data(), dweight.data(), with_bias ? dbias.data() : nullptr,
                              to_double(dout).data(), inp_d.data(), weight_d.data(),
                              to_double(mean).data(), to_double(rstd).data(), N, C);
      OffsetBuffer<T> e_dinp(to_storage<T>(dinp0), offset);
      std::vector<float> e_dweight = dweight0, e_dbias = dbias0;
      cuda::layernorm_backward(e_dinp.get(), e_dweight.data(), with_bias ? e_dbias.data() : nullptr,
                               e_dout.get(), e_inp.get(), e_weight.get(), mean.data(), rstd.data(),
                               N, C, scratch_ptr, scratch.size() - sizeof(float), nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the launches are queued, as above
      EXPECT_TRUE(all_close(from_storage(e_dinp.values()), to_float(dinp), tolerance_for(dtype)))
          << "bias " << with_bias;
      EXPECT_TRUE(norm_close(e_dweight, to_float(dweight), kF32NormRtol));
      if (with_bias) {
        EXPECT_TRUE(norm_close(e_dbias, to_float(dbias), kF32NormRtol));
      } else {
        EXPECT_EQ(e_dbias, dbias0);  // untouched
      }
    }
  });
}

// Shapes: 1x1; C % 4 != 0 (fp32 scalar kernel); N not a multiple of the 8 rows per block (whole
// warps exit early); N > 32 (several row chunks in the parameter gradients); C > 32 * 8 (several
// channel tiles, and rows longer than one pass of a warp's 16-byte packs).
INSTANTIATE_TEST_SUITE_P(
    DtypesOddShapes, LayernormEmuTest,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                       ::testing::Values(NormShape{1, 1}, NormShape{7, 3}, NormShape{3, 7},
                                         NormShape{9, 64}, NormShape{37, 40}, NormShape{5, 264}),
                       ::testing::Values(0, 1)),
    [](const ::testing::TestParamInfo<Param>& info) {
      const NormShape& s = std::get<1>(info.param);
      return std::string(dtype_name(std::get<0>(info.param))) + "_" + std::to_string(s.N) + "x" +
             std::to_string(s.C) + (std::get<2>(info.param) != 0 ? "_misaligned" : "");
    });

// The fused 16-bit copy (Rounded16: the next GEMM's input, rows padded to 8 elements) against the
// launch without it: the fp32 output bitwise, the copy its rounding to bf16 / fp16, the padding
// untouched (layernorm_cuda_test.cc's Rounded16 case, here also under the sanitizers).
TEST(LayernormEmu, Rounded16CopyIsTheRoundedOutput) {
  testing::for_each_copy16_case([&](int64_t N, int64_t C, int64_t ld, bool bf16) {
    const std::vector<float> inp = to_float(random_vector(N * C, 1, -2.0, 3.0));
    const std::vector<float> weight = to_float(random_vector(C, 2));
    const std::vector<float> bias = to_float(random_vector(C, 3));
    std::vector<float> plain(N * C), out(N * C);
    std::vector<uint16_t> copy(N * ld, testing::kCopy16Pad);
    cuda::layernorm_forward<float>(plain.data(), nullptr, nullptr, inp.data(), weight.data(),
                                   bias.data(), N, C, 1e-5f, nullptr);
    cuda::layernorm_forward<float>(out.data(), nullptr, nullptr, inp.data(), weight.data(),
                                   bias.data(), N, C, 1e-5f, nullptr,
                                   {.data = copy.data(), .bf16 = bf16, .ld = ld, .width = C});
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(out, plain);
    EXPECT_TRUE(testing::copy16_is_rounded(copy, ld, out, N, C, bf16));
  });
}

}  // namespace
}  // namespace zero::kernels
