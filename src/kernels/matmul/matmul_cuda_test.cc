// Tests for the CUDA dense layer against its CPU twin (matmul.h) over dtypes x shapes (N, C, OC
// from {1, 3, 17, 64, 127}, 1xN included): forward with and without bias, bias + GELU, backward
// accumulation and null gradients, misaligned pointers, the deterministic bias gradient and the
// plan cache; the 16-bit-operand, fp32-output variant (matmul_forward_16 / matmul_backward_16)
// against a double reference within the fp32 summation bound. Matmul outputs are compared by
// relative error norm (norm_rtol_for). The host tests check, without a GPU, the column-major
// mapping (through a plain column-major GEMM) and the bias gradient's chunk plan.
#include "kernels/matmul/matmul_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numbers>
#include <string>
#include <tuple>
#include <vector>

#include "core/check.h"
#include "core/cuda/cuda_stream.h"
#include "core/dtype.h"
#include "kernels/cuda_test_util.h"
#include "kernels/grad_check.h"
#include "kernels/matmul/matmul.h"
#include "kernels/matmul/matmul_epilogue_cuda.h"
#include "kernels/tolerance.h"

namespace zero::kernels {
namespace {

using testing::DeviceArray;
using testing::norm_close;
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

struct Shape {
  int64_t N, C, OC;
};

// GELU, tanh approximation, in double: the formula of gelu_cpu.cc (the gelu library, and with it
// cpu::gelu_forward, is not linked into this test).
float reference_gelu(float x) {
  const double xd = x;
  return static_cast<float>(
      0.5 * xd *
      (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (xd + 0.044715 * xd * xd * xd))));
}

// ---- Host: the column-major mapping, run through a plain column-major GEMM, is the CPU twin.

// d = op(a) · op(b) + beta * d, every array column-major as `g` describes it.
void column_major_gemm(const cuda::ColumnMajorGemm& g, const float* a, const float* b, float* d,
                       float beta) {
  for (int64_t j = 0; j < g.n; ++j) {
    for (int64_t i = 0; i < g.m; ++i) {
      double acc = 0;
      for (int64_t p = 0; p < g.k; ++p) {
        const float a_ip = g.transpose_a ? a[p + i * g.lda] : a[i + p * g.lda];
        const float b_pj = g.transpose_b ? b[j + p * g.ldb] : b[p + j * g.ldb];
        acc += static_cast<double>(a_ip) * b_pj;
      }
      float& d_ij = d[i + j * g.ldd];
      d_ij = static_cast<float>(acc + beta * d_ij);
    }
  }
}

TEST(MatmulGemmMapping, ColumnMajorGemmsReproduceCpuTwin) {
  for (const Shape s : {Shape{1, 1, 1}, Shape{1, 13, 7}, Shape{7, 1, 5}, Shape{3, 17, 1},
                        Shape{13, 7, 67}, Shape{31, 5, 3}}) {
    SCOPED_TRACE(std::to_string(s.N) + "x" + std::to_string(s.C) + "x" + std::to_string(s.OC));
    const auto inp = to_float(random_vector(s.N * s.C, 1));
    const auto weight = to_float(random_vector(s.OC * s.C, 2));
    const auto bias = to_float(random_vector(s.OC, 3));
    const auto dout = to_float(random_vector(s.N * s.OC, 4));
    const double rtol = norm_rtol_for(DType::kF32);

    // forward: A = weight, B = inp, D = out; the BIAS epilogue adds bias(m = OC) to every column.
    std::vector<float> out(s.N * s.OC, 0.0f), want_out(s.N * s.OC);
    column_major_gemm(cuda::matmul_forward_gemm(s.N, s.C, s.OC), weight.data(), inp.data(),
                      out.data(), 0.0f);
    for (int64_t col = 0; col < s.N; ++col) {
      for (int64_t row = 0; row < s.OC; ++row) out[row + col * s.OC] += bias[row];
    }
    cpu::matmul_forward(want_out.data(), inp.data(), weight.data(), bias.data(), s.N, s.C, s.OC);
    EXPECT_TRUE(norm_close(out, want_out, rtol));

    // dinp: A = weight, B = dout, D = dinp; dweight: A = inp, B = dout, D = dweight (beta = 1).
    const auto dinp0 = to_float(random_vector(s.N * s.C, 5));
    const auto dweight0 = to_float(random_vector(s.OC * s.C, 6));
    std::vector<float> dinp = dinp0, dweight = dweight0, want_dinp = dinp0, want_dweight = dweight0;
    column_major_gemm(cuda::matmul_dinp_gemm(s.N, s.C, s.OC), weight.data(), dout.data(),
                      dinp.data(), 1.0f);
    column_major_gemm(cuda::matmul_dweight_gemm(s.N, s.C, s.OC), inp.data(), dout.data(),
                      dweight.data(), 1.0f);
    cpu::matmul_backward<float>(want_dinp.data(), want_dweight.data(), nullptr, dout.data(),
                                inp.data(), weight.data(), s.N, s.C, s.OC);
    EXPECT_TRUE(norm_close(dinp, want_dinp, rtol));
    EXPECT_TRUE(norm_close(dweight, want_dweight, rtol));
  }
}

TEST(BiasGradPlan, CoversEveryRowOnceWithinTheScratch) {
  const size_t kCapacities[] = {0, 4096, cuda::MatmulContext::kWorkspaceBytes};
  for (int64_t N : {0, 1, 63, 64, 65, 127, 4099, 1000003}) {
    for (int64_t OC : {1, 3, 67, 4096, 50257}) {
      for (size_t capacity : kCapacities) {
        SCOPED_TRACE("N " + std::to_string(N) + " OC " + std::to_string(OC) + " capacity " +
                     std::to_string(capacity));
        const cuda::BiasGradPlan plan = cuda::bias_grad_plan(N, OC, capacity);
        ASSERT_GE(plan.chunks, 1);
        if (plan.chunks == 1) {
          EXPECT_EQ(plan.rows_per_chunk, N);
          EXPECT_EQ(plan.scratch_bytes, 0u);
          continue;
        }
        EXPECT_GE(plan.chunks * plan.rows_per_chunk, N);        // every row is in a chunk
        EXPECT_LT((plan.chunks - 1) * plan.rows_per_chunk, N);  // no chunk is empty
        EXPECT_GE(plan.rows_per_chunk, 64);                     // enough work per thread row
        EXPECT_EQ(plan.scratch_bytes, static_cast<size_t>(plan.chunks * OC) * sizeof(float));
        EXPECT_LE(plan.scratch_bytes, capacity);
        EXPECT_LE(plan.chunks, 65535);
      }
    }
  }
  // The shapes the GPU tests below rely on to reach both paths.
  EXPECT_EQ(cuda::bias_grad_plan(64, 17, cuda::MatmulContext::kWorkspaceBytes).chunks, 1);
  EXPECT_EQ(cuda::bias_grad_plan(127, 17, cuda::MatmulContext::kWorkspaceBytes).chunks, 1);
  EXPECT_GT(cuda::bias_grad_plan(1031, 4099, cuda::MatmulContext::kWorkspaceBytes).chunks, 1);
  EXPECT_GT(cuda::bias_grad_plan(2053, 131, cuda::MatmulContext::kWorkspaceBytes).chunks, 1);
  EXPECT_GT(cuda::bias_grad_plan(4099, 67, cuda::MatmulContext::kWorkspaceBytes).chunks, 1);
  EXPECT_GT(cuda::bias_grad_plan(263, 67, cuda::MatmulContext::kWorkspaceBytes).chunks, 1);
  EXPECT_GT(cuda::bias_grad_plan(131, 33, cuda::MatmulContext::kWorkspaceBytes).chunks, 1);
}

// ---- GPU

// One context for the whole test binary (plans accumulate across tests, as in training). Leaked
// on purpose: destroying cuBLASLt objects after the CUDA runtime shut down at exit is unsafe.
cuda::MatmulContext& context() {
  static cuda::MatmulContext* ctx = [] {
    auto created = cuda::MatmulContext::create();
    ZERO_CHECK(created.ok(), created.status().to_string());
    return std::move(created).value().release();
  }();
  return *ctx;
}

// A second context whose every GEMM takes the reference kernel (MatmulContext::gemm's fallback).
cuda::MatmulContext& reference_context() {
  static cuda::MatmulContext* ctx = [] {
    auto created = cuda::MatmulContext::create();
    ZERO_CHECK(created.ok(), created.status().to_string());
    created.value()->set_reference_only(true);
    return std::move(created).value().release();
  }();
  return *ctx;
}

// Host inputs of one shape, already rounded to T (the CPU twin sees what the kernel sees).
template <typename T>
struct Inputs {
  explicit Inputs(const Shape& s)
      : inp(rounded<T>(to_float(random_vector(s.N * s.C, 11)))),
        weight(rounded<T>(to_float(random_vector(s.OC * s.C, 12)))),
        bias(rounded<T>(to_float(random_vector(s.OC, 13)))),
        dout(rounded<T>(to_float(random_vector(s.N * s.OC, 14)))),
        dinp0(rounded<T>(to_float(random_vector(s.N * s.C, 15)))),
        dweight0(to_float(random_vector(s.OC * s.C, 16))),
        dbias0(to_float(random_vector(s.OC, 17))) {}
  std::vector<float> inp, weight, bias, dout, dinp0, dweight0, dbias0;
};

using Param = std::tuple<DType, int64_t, int64_t, int64_t>;  // storage dtype, N, C, OC

class MatmulCudaTest : public ::testing::TestWithParam<Param> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  Shape shape() const {
    return {std::get<1>(GetParam()), std::get<2>(GetParam()), std::get<3>(GetParam())};
  }
};

TEST_P(MatmulCudaTest, ForwardMatchesCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const Shape s = shape();
  const double rtol = norm_rtol_for(dtype());
  with_storage_type(dtype(), [&]<typename T>() {
    const Inputs<T> in(s);
    DeviceArray<T> d_inp(to_storage<T>(in.inp)), d_weight(to_storage<T>(in.weight)),
        d_bias(to_storage<T>(in.bias));
    zero::cuda::CudaStream stream;
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(with_bias ? "with bias" : "without bias");
      const float* bias = with_bias ? in.bias.data() : nullptr;
      std::vector<float> want(s.N * s.OC);
      cpu::matmul_forward(want.data(), in.inp.data(), in.weight.data(), bias, s.N, s.C, s.OC);
      DeviceArray<T> d_out(to_storage<T>(std::vector<float>(s.N * s.OC, 123.0f)));  // overwritten
      cuda::matmul_forward<T>(context(), d_out.get(), d_inp.get(), d_weight.get(),
                              with_bias ? d_bias.get() : nullptr, s.N, s.C, s.OC, stream);
      EXPECT_TRUE(norm_close(d_out.download_f32(), want, rtol));
    }
  });
}

TEST_P(MatmulCudaTest, BiasGeluForwardIsMatmulThenGelu) {
  ZERO_SKIP_WITHOUT_GPU();
  const Shape s = shape();
  const double rtol = norm_rtol_for(dtype());
  with_storage_type(dtype(), [&]<typename T>() {
    const Inputs<T> in(s);
    std::vector<float> want_pre(s.N * s.OC), want_out(s.N * s.OC);
    cpu::matmul_forward(want_pre.data(), in.inp.data(), in.weight.data(), in.bias.data(), s.N, s.C,
                        s.OC);
    for (size_t i = 0; i < want_pre.size(); ++i) want_out[i] = reference_gelu(want_pre[i]);

    DeviceArray<T> d_inp(to_storage<T>(in.inp)), d_weight(to_storage<T>(in.weight)),
        d_bias(to_storage<T>(in.bias)), d_pre(s.N * s.OC), d_out(s.N * s.OC);
    zero::cuda::CudaStream stream;
    cuda::matmul_bias_gelu_forward<T>(context(), d_out.get(), d_pre.get(), d_inp.get(),
                                      d_weight.get(), d_bias.get(), s.N, s.C, s.OC, stream);
    EXPECT_TRUE(norm_close(d_pre.download_f32(), want_pre, rtol));
    EXPECT_TRUE(norm_close(d_out.download_f32(), want_out, rtol));
  });
}

TEST_P(MatmulCudaTest, BackwardAccumulatesLikeCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const Shape s = shape();
  const double rtol = norm_rtol_for(dtype());
  with_storage_type(dtype(), [&]<typename T>() {
    const Inputs<T> in(s);
    std::vector<float> want_dinp = in.dinp0, want_dweight = in.dweight0, want_dbias = in.dbias0;
    cpu::matmul_backward(want_dinp.data(), want_dweight.data(), want_dbias.data(), in.dout.data(),
                         in.inp.data(), in.weight.data(), s.N, s.C, s.OC);

    DeviceArray<T> d_inp(to_storage<T>(in.inp)), d_weight(to_storage<T>(in.weight)),
        d_dout(to_storage<T>(in.dout)), d_dinp(to_storage<T>(in.dinp0));
    DeviceArray<float> d_dweight(in.dweight0), d_dbias(in.dbias0);
    zero::cuda::CudaStream stream;
    cuda::matmul_backward<T>(context(), d_dinp.get(), d_dweight.get(), d_dbias.get(), d_dout.get(),
                             d_inp.get(), d_weight.get(), s.N, s.C, s.OC, stream);
    EXPECT_TRUE(norm_close(d_dinp.download_f32(), want_dinp, rtol));
    EXPECT_TRUE(norm_close(d_dweight.download_f32(), want_dweight, rtol));
    EXPECT_TRUE(norm_close(d_dbias.download_f32(), want_dbias, rtol));
  });
}

TEST_P(MatmulCudaTest, BackwardComputesEachGradientAlone) {
  ZERO_SKIP_WITHOUT_GPU();
  const Shape s = shape();
  const double rtol = norm_rtol_for(dtype());
  with_storage_type(dtype(), [&]<typename T>() {
    const Inputs<T> in(s);
    std::vector<float> want_dinp(s.N * s.C, 0.0f), want_dweight(s.OC * s.C, 0.0f),
        want_dbias(s.OC, 0.0f);
    cpu::matmul_backward(want_dinp.data(), want_dweight.data(), want_dbias.data(), in.dout.data(),
                         in.inp.data(), in.weight.data(), s.N, s.C, s.OC);

    DeviceArray<T> d_inp(to_storage<T>(in.inp)), d_weight(to_storage<T>(in.weight)),
        d_dout(to_storage<T>(in.dout)), d_dinp(s.N * s.C);
    DeviceArray<float> d_dweight(s.OC * s.C), d_dbias(s.OC);
    zero::cuda::CudaStream stream;
    cuda::matmul_backward<T>(context(), d_dinp.get(), nullptr, nullptr, d_dout.get(), d_inp.get(),
                             d_weight.get(), s.N, s.C, s.OC, stream);
    cuda::matmul_backward<T>(context(), nullptr, d_dweight.get(), nullptr, d_dout.get(),
                             d_inp.get(), d_weight.get(), s.N, s.C, s.OC, stream);
    cuda::matmul_backward<T>(context(), nullptr, nullptr, d_dbias.get(), d_dout.get(), d_inp.get(),
                             d_weight.get(), s.N, s.C, s.OC, stream);
    EXPECT_TRUE(norm_close(d_dinp.download_f32(), want_dinp, rtol));
    EXPECT_TRUE(norm_close(d_dweight.download_f32(), want_dweight, rtol));
    EXPECT_TRUE(norm_close(d_dbias.download_f32(), want_dbias, rtol));

    // accumulate_dinp false over NaN (not read): the product alone, as into zeros above.
    DeviceArray<T> d_dinp_over(to_storage<T>(std::vector<float>(s.N * s.C, NAN)));
    cuda::matmul_backward<T>(context(), d_dinp_over.get(), nullptr, nullptr, d_dout.get(),
                             d_inp.get(), d_weight.get(), s.N, s.C, s.OC, stream,
                             /*accumulate_dinp=*/false);
    EXPECT_TRUE(norm_close(d_dinp_over.download_f32(), want_dinp, rtol));
  });
}

// The fallback GEMM (no cuBLASLt algorithm) gives the CPU twin's results too: forward with and
// without bias (broadcast + accumulate), backward accumulating into every gradient.
TEST_P(MatmulCudaTest, ReferenceGemmMatchesCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const Shape s = shape();
  const double rtol = norm_rtol_for(dtype());
  with_storage_type(dtype(), [&]<typename T>() {
    const Inputs<T> in(s);
    DeviceArray<T> d_inp(to_storage<T>(in.inp)), d_weight(to_storage<T>(in.weight)),
        d_bias(to_storage<T>(in.bias)), d_dout(to_storage<T>(in.dout)),
        d_dinp(to_storage<T>(in.dinp0));
    DeviceArray<float> d_dweight(in.dweight0), d_dbias(in.dbias0);
    zero::cuda::CudaStream stream;
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(with_bias ? "with bias" : "without bias");
      std::vector<float> want(s.N * s.OC);
      cpu::matmul_forward(want.data(), in.inp.data(), in.weight.data(),
                          with_bias ? in.bias.data() : nullptr, s.N, s.C, s.OC);
      DeviceArray<T> d_out(to_storage<T>(std::vector<float>(s.N * s.OC, 123.0f)));
      cuda::matmul_forward<T>(reference_context(), d_out.get(), d_inp.get(), d_weight.get(),
                              with_bias ? d_bias.get() : nullptr, s.N, s.C, s.OC, stream);
      EXPECT_TRUE(norm_close(d_out.download_f32(), want, rtol));
    }
    std::vector<float> want_dinp = in.dinp0, want_dweight = in.dweight0, want_dbias = in.dbias0;
    cpu::matmul_backward(want_dinp.data(), want_dweight.data(), want_dbias.data(), in.dout.data(),
                         in.inp.data(), in.weight.data(), s.N, s.C, s.OC);
    cuda::matmul_backward<T>(reference_context(), d_dinp.get(), d_dweight.get(), d_dbias.get(),
                             d_dout.get(), d_inp.get(), d_weight.get(), s.N, s.C, s.OC, stream);
    EXPECT_TRUE(norm_close(d_dinp.download_f32(), want_dinp, rtol));
    EXPECT_TRUE(norm_close(d_dweight.download_f32(), want_dweight, rtol));
    EXPECT_TRUE(norm_close(d_dbias.download_f32(), want_dbias, rtol));
  });
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(dtype_name(std::get<0>(info.param))) + "_N" +
         std::to_string(std::get<1>(info.param)) + "_C" + std::to_string(std::get<2>(info.param)) +
         "_OC" + std::to_string(std::get<3>(info.param));
}

// On the emulator (one host thread per CUDA thread), fewer shapes: 1 and primes on either side of
// the reference GEMM's 16-wide tile.
INSTANTIATE_TEST_SUITE_P(
    DtypesShapes, MatmulCudaTest,
    ::testing::Combine(
        ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
        ::testing::ValuesIn(testing::gpu_or_emulated<int64_t>({1, 3, 17, 64, 127}, {1, 3, 17})),
        ::testing::ValuesIn(testing::gpu_or_emulated<int64_t>({1, 3, 17, 64, 127}, {1, 17})),
        ::testing::ValuesIn(testing::gpu_or_emulated<int64_t>({1, 3, 17, 64, 127}, {3, 17}))),
    param_name);

class MatmulCudaDtypeTest : public ::testing::TestWithParam<DType> {};

// Every array one element past an aligned address: cuBLASLt must get plans for 2- or 4-byte
// aligned pointers (and the bias goes through the broadcast fallback), with the same results.
TEST_P(MatmulCudaDtypeTest, MisalignedPointersMatchCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const double rtol = norm_rtol_for(GetParam());
  with_storage_type(GetParam(), [&]<typename T>() {
    for (const Shape s : {Shape{17, 64, 127}, Shape{64, 127, 3}, Shape{127, 17, 64}}) {
      SCOPED_TRACE(std::to_string(s.N) + "x" + std::to_string(s.C) + "x" + std::to_string(s.OC));
      const Inputs<T> in(s);
      auto shifted = [](const std::vector<float>& v) {
        std::vector<float> out(v.size() + 1, 0.0f);
        std::copy(v.begin(), v.end(), out.begin() + 1);
        return out;
      };
      auto unshifted = [](const std::vector<float>& v) {
        return std::vector<float>(v.begin() + 1, v.end());
      };
      std::vector<float> want_out(s.N * s.OC), want_dinp = in.dinp0, want_dweight = in.dweight0,
                                               want_dbias = in.dbias0;
      cpu::matmul_forward(want_out.data(), in.inp.data(), in.weight.data(), in.bias.data(), s.N,
                          s.C, s.OC);
      cpu::matmul_backward(want_dinp.data(), want_dweight.data(), want_dbias.data(), in.dout.data(),
                           in.inp.data(), in.weight.data(), s.N, s.C, s.OC);

      DeviceArray<T> d_inp(to_storage<T>(shifted(in.inp))),
          d_weight(to_storage<T>(shifted(in.weight))), d_bias(to_storage<T>(shifted(in.bias))),
          d_dout(to_storage<T>(shifted(in.dout))), d_dinp(to_storage<T>(shifted(in.dinp0))),
          d_out(s.N * s.OC + 1);
      DeviceArray<float> d_dweight(shifted(in.dweight0)), d_dbias(shifted(in.dbias0));
      zero::cuda::CudaStream stream;
      cuda::matmul_forward<T>(context(), d_out.get() + 1, d_inp.get() + 1, d_weight.get() + 1,
                              d_bias.get() + 1, s.N, s.C, s.OC, stream);
      cuda::matmul_backward<T>(context(), d_dinp.get() + 1, d_dweight.get() + 1, d_dbias.get() + 1,
                               d_dout.get() + 1, d_inp.get() + 1, d_weight.get() + 1, s.N, s.C,
                               s.OC, stream);
      EXPECT_TRUE(norm_close(unshifted(d_out.download_f32()), want_out, rtol));
      EXPECT_TRUE(norm_close(unshifted(d_dinp.download_f32()), want_dinp, rtol));
      EXPECT_TRUE(norm_close(unshifted(d_dweight.download_f32()), want_dweight, rtol));
      EXPECT_TRUE(norm_close(unshifted(d_dbias.download_f32()), want_dbias, rtol));
    }
  });
}

// Many rows: the bias gradient goes through per-chunk partial sums in the workspace, and two runs
// give the same bits (no atomics, fixed order). Rows stay below ~4k: the CPU twin's sequential
// fp32 sum has a relative error growing like sqrt(N) * 4e-8, which must stay well inside the fp32
// norm bound.
TEST_P(MatmulCudaDtypeTest, BiasGradOverManyRowsIsCorrectAndDeterministic) {
  ZERO_SKIP_WITHOUT_GPU();
  const double rtol = norm_rtol_for(GetParam());
  with_storage_type(GetParam(), [&]<typename T>() {
    // Emulated: fewer rows, still several chunks (the last one short).
    for (const Shape s : testing::gpu_or_emulated<Shape>(
             {Shape{4099, 1, 67}, Shape{2053, 1, 131}, Shape{1031, 1, 4099}},
             {Shape{263, 1, 67}, Shape{131, 1, 33}})) {
      SCOPED_TRACE(std::to_string(s.N) + " rows x " + std::to_string(s.OC));
      const auto dout = rounded<T>(to_float(random_vector(s.N * s.OC, 21)));
      std::vector<float> want(s.OC, 0.0f);
      cpu::matmul_backward<float>(nullptr, nullptr, want.data(), dout.data(), nullptr, nullptr, s.N,
                                  s.C, s.OC);
      DeviceArray<T> d_dout(to_storage<T>(dout));
      DeviceArray<float> first(s.OC), second(s.OC);
      zero::cuda::CudaStream stream;
      for (DeviceArray<float>* dbias : {&first, &second}) {
        cuda::bias_grad(dbias->get(), d_dout.get(), s.N, s.OC, context().workspace(),
                        cuda::MatmulContext::kWorkspaceBytes, stream);
      }
      const std::vector<float> got = first.download(), again = second.download();
      EXPECT_TRUE(norm_close(got, want, rtol));
      EXPECT_EQ(std::memcmp(got.data(), again.data(), got.size() * sizeof(float)), 0);
    }
  });
}

// C == 0: an empty product, out is the bias; N == 0 or OC == 0: nothing to do.
TEST_P(MatmulCudaDtypeTest, EmptyDimensions) {
  ZERO_SKIP_WITHOUT_GPU();
  with_storage_type(GetParam(), [&]<typename T>() {
    const int64_t N = 5, OC = 7;
    const auto bias = rounded<T>(to_float(random_vector(OC, 31)));
    std::vector<float> want(N * OC);
    for (int64_t n = 0; n < N; ++n) std::copy(bias.begin(), bias.end(), want.begin() + n * OC);
    DeviceArray<T> d_bias(to_storage<T>(bias)), d_out(N * OC), d_pre(N * OC);
    DeviceArray<float> d_dbias(OC);
    zero::cuda::CudaStream stream;
    cuda::matmul_forward<T>(context(), d_out.get(), nullptr, nullptr, d_bias.get(), N, 0, OC,
                            stream);
    EXPECT_EQ(d_out.download_f32(), want);
    cuda::matmul_bias_gelu_forward<T>(context(), d_out.get(), d_pre.get(), nullptr, nullptr,
                                      nullptr, N, 0, OC, stream);
    EXPECT_EQ(d_out.download_f32(), std::vector<float>(N * OC, 0.0f));  // gelu(0) = 0
    cuda::matmul_forward<T>(context(), nullptr, nullptr, nullptr, nullptr, 0, 3, OC, stream);
    cuda::matmul_backward<T>(context(), nullptr, nullptr, d_dbias.get(), nullptr, nullptr, nullptr,
                             0, 3, OC, stream);
    EXPECT_EQ(d_dbias.download_f32(), std::vector<float>(OC, 0.0f));
  });
}

// After one step of a shape, further steps find every plan in the cache.
TEST_P(MatmulCudaDtypeTest, SteadyStateAddsNoPlans) {
  ZERO_SKIP_WITHOUT_GPU();
#if defined(ZERO_CUDA_EMU)
  GTEST_SKIP() << "cuBLASLt's plan cache: the emulator has no cuBLASLt (every GEMM is the "
                  "reference kernel, no plans)";
#endif
  with_storage_type(GetParam(), [&]<typename T>() {
    const Shape s{41, 29, 53};  // a shape no other test uses
    const Inputs<T> in(s);
    DeviceArray<T> d_inp(to_storage<T>(in.inp)), d_weight(to_storage<T>(in.weight)),
        d_bias(to_storage<T>(in.bias)), d_dout(to_storage<T>(in.dout)), d_out(s.N * s.OC),
        d_dinp(s.N * s.C);
    DeviceArray<float> d_dweight(s.OC * s.C), d_dbias(s.OC);
    zero::cuda::CudaStream stream;
    auto step = [&] {
      cuda::matmul_forward<T>(context(), d_out.get(), d_inp.get(), d_weight.get(), d_bias.get(),
                              s.N, s.C, s.OC, stream);
      cuda::matmul_backward<T>(context(), d_dinp.get(), d_dweight.get(), d_dbias.get(),
                               d_dout.get(), d_inp.get(), d_weight.get(), s.N, s.C, s.OC, stream);
    };
    step();
    const size_t plans = context().num_plans();
    step();
    step();
    EXPECT_EQ(context().num_plans(), plans);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);  // why: surface asynchronous errors
  });
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MatmulCudaDtypeTest,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

// ---- The 16-bit-operand dense layer (matmul_forward_16 / matmul_backward_16, a 16-bit model's
// autocast-style GEMMs): 16-bit inputs, fp32 outputs. Reference: the same products in double over
// the rounded inputs. A product of two 16-bit values is exact in fp32 (8 + 8 or 11 + 11 significant
// bits <= 24), so the only error is fp32 summation: K terms, then the accumulation into D (beta 1)
// and the bias, each a rounding, give |got - ref| <= (K + 2) 2^-24 (Σ|terms| + |D0| + |bias|)
// (Higham's γ bound) per element. Rows of the 16-bit copies are `ld` apart: dense, padded to 8, and
// an odd stride.

// Element (r, c) of a row-major (rows, width) array with row stride ld, zeros in the padding.
std::vector<float> padded(const std::vector<float>& dense, int64_t rows, int64_t width,
                          int64_t ld) {
  std::vector<float> out(static_cast<size_t>(rows * ld), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < width; ++c) out[r * ld + c] = dense[r * width + c];
  }
  return out;
}

// |got - want| <= bound elementwise, with the first failure named.
::testing::AssertionResult within(const std::vector<float>& got, const std::vector<double>& want,
                                  const std::vector<double>& bound) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= bound[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want "
                                           << want[i] << " (bound " << bound[i] << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

using Param16 = std::tuple<DType, int64_t, int64_t, int64_t, int64_t>;  // dtype, N, C, OC, ld kind

class Matmul16CudaTest : public ::testing::TestWithParam<Param16> {};

// ld kind: 0 dense, 1 padded to 8 (what CudaTransformer uses), 2 padded by an odd 3.
int64_t ld_for(int64_t width, int64_t kind) {
  return kind == 0 ? width : kind == 1 ? (width + 7) / 8 * 8 : width + 3;
}

TEST_P(Matmul16CudaTest, MatchesDoubleReferenceOnRoundedInputs) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto [dtype, N, C, OC, ld_kind] = GetParam();
  const int64_t inp_ld = ld_for(C, ld_kind), dout_ld = ld_for(OC, ld_kind);
  constexpr double kU32 = 0x1p-24;
  const auto with_16bit_type = [](DType d, auto&& f) {
    if (d == DType::kBF16) {
      f.template operator()<__nv_bfloat16>();
    } else {
      f.template operator()<__half>();
    }
  };
  with_16bit_type(dtype, [&]<typename T>() {
    // Rounded to T: the values the GEMM reads (the caller's cast kernel rounds the same way).
    const std::vector<float> inp = rounded<T>(to_float(random_vector(N * C, 21)));
    const std::vector<float> weight = rounded<T>(to_float(random_vector(OC * C, 22)));
    const std::vector<float> dout32 = to_float(random_vector(N * OC, 23));
    const std::vector<float> dout = rounded<T>(dout32);
    const std::vector<float> bias = to_float(random_vector(OC, 24));
    const std::vector<float> dinp0 = to_float(random_vector(N * C, 25));
    const std::vector<float> dweight0 = to_float(random_vector(OC * C, 26));
    const std::vector<float> dbias0 = to_float(random_vector(OC, 27));
    DeviceArray<T> d_inp(to_storage<T>(padded(inp, N, C, inp_ld)));
    DeviceArray<T> d_dout(to_storage<T>(padded(dout, N, OC, dout_ld)));
    DeviceArray<T> d_weight(to_storage<T>(weight));
    DeviceArray<float> d_dout32(dout32), d_bias(bias);
    zero::cuda::CudaStream stream;

    // Forward, without and with bias.
    for (const bool with_bias : {false, true}) {
      SCOPED_TRACE(with_bias ? "forward with bias" : "forward");
      std::vector<double> want(static_cast<size_t>(N * OC)), bound(want.size());
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t o = 0; o < OC; ++o) {
          double sum = with_bias ? bias[o] : 0.0, magnitude = with_bias ? std::fabs(bias[o]) : 0.0;
          for (int64_t c = 0; c < C; ++c) {
            const double term = static_cast<double>(inp[n * C + c]) * weight[o * C + c];
            sum += term;
            magnitude += std::fabs(term);
          }
          want[n * OC + o] = sum;
          bound[n * OC + o] = static_cast<double>(C + 2) * kU32 * magnitude;
        }
      }
      // Without bias the output rows are `ld` apart too; the padding keeps its values.
      const int64_t out_ld = with_bias ? OC : ld_for(OC, ld_kind);
      DeviceArray<float> d_out(std::vector<float>(static_cast<size_t>(N * out_ld), 123.0f));
      cuda::matmul_forward_16<T>(context(), d_out.get(), out_ld, d_inp.get(), inp_ld,
                                 d_weight.get(), with_bias ? d_bias.get() : nullptr, N, C, OC,
                                 stream);
      const std::vector<float> got_padded = d_out.download();
      std::vector<float> got(static_cast<size_t>(N * OC));
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t o = 0; o < out_ld; ++o) {
          const float g = got_padded[static_cast<size_t>(n * out_ld + o)];
          if (o < OC) {
            got[static_cast<size_t>(n * OC + o)] = g;
          } else {
            EXPECT_EQ(g, 123.0f) << "padding of row " << n << " column " << o;
          }
        }
      }
      EXPECT_TRUE(within(got, want, bound));
    }

    // Backward: dinp, dweight and dbias accumulated onto nonzero values.
    std::vector<double> want_dinp(static_cast<size_t>(N * C)), bound_dinp(want_dinp.size());
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t c = 0; c < C; ++c) {
        double sum = dinp0[n * C + c], magnitude = std::fabs(dinp0[n * C + c]);
        for (int64_t o = 0; o < OC; ++o) {
          const double term = static_cast<double>(dout[n * OC + o]) * weight[o * C + c];
          sum += term;
          magnitude += std::fabs(term);
        }
        want_dinp[n * C + c] = sum;
        bound_dinp[n * C + c] = static_cast<double>(OC + 2) * kU32 * magnitude;
      }
    }
    std::vector<double> want_dweight(static_cast<size_t>(OC * C)),
        bound_dweight(want_dweight.size());
    for (int64_t o = 0; o < OC; ++o) {
      for (int64_t c = 0; c < C; ++c) {
        double sum = dweight0[o * C + c], magnitude = std::fabs(dweight0[o * C + c]);
        for (int64_t n = 0; n < N; ++n) {
          const double term = static_cast<double>(dout[n * OC + o]) * inp[n * C + c];
          sum += term;
          magnitude += std::fabs(term);
        }
        want_dweight[o * C + c] = sum;
        bound_dweight[o * C + c] = static_cast<double>(N + 2) * kU32 * magnitude;
      }
    }
    // The bias gradient sums the fp32 gradient, not its rounded copy.
    std::vector<double> want_dbias(static_cast<size_t>(OC)), bound_dbias(want_dbias.size());
    for (int64_t o = 0; o < OC; ++o) {
      double sum = dbias0[o], magnitude = std::fabs(dbias0[o]);
      for (int64_t n = 0; n < N; ++n) {
        sum += dout32[n * OC + o];
        magnitude += std::fabs(dout32[n * OC + o]);
      }
      want_dbias[o] = sum;
      bound_dbias[o] = static_cast<double>(N + 2) * kU32 * magnitude;
    }
    DeviceArray<float> d_dinp(dinp0), d_dweight(dweight0), d_dbias(dbias0);
    cuda::matmul_backward_16<T>(context(), d_dinp.get(), d_dweight.get(), d_dbias.get(),
                                d_dout32.get(), d_dout.get(), dout_ld, d_inp.get(), inp_ld,
                                d_weight.get(), N, C, OC, stream);
    EXPECT_TRUE(within(d_dinp.download(), want_dinp, bound_dinp)) << "dinp";
    EXPECT_TRUE(within(d_dweight.download(), want_dweight, bound_dweight)) << "dweight";
    EXPECT_TRUE(within(d_dbias.download(), want_dbias, bound_dbias)) << "dbias";

    // Each gradient alone (the others null) is the same.
    DeviceArray<float> d_dinp_alone(dinp0), d_dweight_alone(dweight0);
    cuda::matmul_backward_16<T>(context(), d_dinp_alone.get(), nullptr, nullptr, nullptr,
                                d_dout.get(), dout_ld, nullptr, inp_ld, d_weight.get(), N, C, OC,
                                stream);
    cuda::matmul_backward_16<T>(context(), nullptr, d_dweight_alone.get(), nullptr, nullptr,
                                d_dout.get(), dout_ld, d_inp.get(), inp_ld, d_weight.get(), N, C,
                                OC, stream);
    EXPECT_EQ(d_dinp_alone.download(), d_dinp.download());
    EXPECT_EQ(d_dweight_alone.download(), d_dweight.download());

    // accumulate_dinp false: dinp (NaN before: not read) is the product alone.
    std::vector<double> want_product(want_dinp.size());
    for (size_t i = 0; i < want_product.size(); ++i) want_product[i] = want_dinp[i] - dinp0[i];
    DeviceArray<float> d_dinp_over(std::vector<float>(dinp0.size(), NAN));
    cuda::matmul_backward_16<T>(context(), d_dinp_over.get(), nullptr, nullptr, nullptr,
                                d_dout.get(), dout_ld, nullptr, inp_ld, d_weight.get(), N, C, OC,
                                stream, /*accumulate_dinp=*/false);
    EXPECT_TRUE(within(d_dinp_over.download(), want_product, bound_dinp)) << "dinp overwritten";
  });
}

std::string param16_name(const ::testing::TestParamInfo<Param16>& info) {
  static const char* const kLds[] = {"dense", "ld8", "ldodd"};
  return std::string(dtype_name(std::get<0>(info.param))) + "_N" +
         std::to_string(std::get<1>(info.param)) + "_C" + std::to_string(std::get<2>(info.param)) +
         "_OC" + std::to_string(std::get<3>(info.param)) + "_" + kLds[std::get<4>(info.param)];
}

// On the emulator, 1 and primes around the reference GEMM's 16-wide tile; on a GPU also the
// tensor-core shapes (multiples of 8) and a wide odd output like an LM head's vocabulary.
INSTANTIATE_TEST_SUITE_P(
    DtypesShapes, Matmul16CudaTest,
    ::testing::Combine(
        ::testing::Values(DType::kBF16, DType::kF16),
        ::testing::ValuesIn(testing::gpu_or_emulated<int64_t>({1, 17, 64, 127}, {1, 17})),
        ::testing::ValuesIn(testing::gpu_or_emulated<int64_t>({1, 17, 64}, {3, 17})),
        ::testing::ValuesIn(testing::gpu_or_emulated<int64_t>({1, 17, 96, 1031}, {1, 19})),
        ::testing::Values(0, 1, 2)),
    param16_name);

}  // namespace
}  // namespace zero::kernels
