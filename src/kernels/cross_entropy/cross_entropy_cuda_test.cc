// Tests for the CUDA cross-entropy kernels against the CPU twin (cross_entropy.h) over storage
// dtypes x (N, V), including 1-element and prime vocabularies, GPT-2's and Llama 3's V, ignored
// targets, in-place backward, the fused kernel, rows that are not 16-byte aligned, and Gemma 2's
// soft-capped logits.
// Legend: N positions, V vocab. logits/dlogits (N, V); targets, losses, dloss (N).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/cuda/cuda_stream.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/cross_entropy/cross_entropy_cuda.h"
#include "kernels/cuda_test_util.h"
#include "kernels/grad_check.h"

namespace zero::kernels {
namespace {

using testing::all_close;
using testing::DeviceArray;
using testing::dtype_of;
using testing::random_vector;
using testing::rounded;
using testing::to_float;
using testing::to_storage;

struct CeShape {
  int64_t N, V;
};

void PrintTo(const CeShape& s, std::ostream* os) { *os << "N" << s.N << "_V" << s.V; }

// The kernel is linear in dloss; a large one keeps most gradient entries far above the table's
// atol, so the relative part of the tolerance is what gets tested (and stays within fp16 range).
constexpr double kDlossScale = 1024.0;

// One problem: rounded logits, targets with ignored rows and both ends of the vocabulary, per-row
// dloss, and the CPU twin's answers computed in double on exactly those values.
template <typename T>
struct CeCase {
  explicit CeCase(const CeShape& s) : N(s.N), V(s.V) {
    logits = rounded<T>(to_float(random_vector(N * V, 41, -4, 4)));
    const auto r = random_vector(N, 42, 0, 1);
    for (int64_t n = 0; n < N; ++n) {
      int32_t t = static_cast<int32_t>(r[n] * static_cast<double>(V)) % static_cast<int32_t>(V);
      if (n % 3 == 1) t = cpu::kIgnoreIndex;
      if (n % 5 == 2) t = static_cast<int32_t>(V - 1);
      if (n % 7 == 4) t = 0;
      targets.push_back(t);
    }
    const auto u = random_vector(N, 43, 0.5, 1.5);
    for (int64_t n = 0; n < N; ++n) dloss.push_back(static_cast<float>(u[n] * kDlossScale));

    const std::vector<double> logits_d(logits.begin(), logits.end());
    const std::vector<double> dloss_d(dloss.begin(), dloss.end());
    std::vector<double> losses_d(N), dlogits_d(N * V);
    cpu::cross_entropy_forward(losses_d.data(), logits_d.data(), targets.data(), N, V);
    cpu::cross_entropy_backward(dlogits_d.data(), logits_d.data(), targets.data(), dloss_d.data(),
                                N, V);
    want_losses.assign(losses_d.begin(), losses_d.end());
    want_dlogits.assign(dlogits_d.begin(), dlogits_d.end());
  }

  int64_t N, V;
  std::vector<float> logits;  // values representable in T
  std::vector<int32_t> targets;
  std::vector<float> dloss;
  std::vector<float> want_losses, want_dlogits;
};

// Losses are fp32 outputs computed in fp32 from exactly known inputs whatever T is, so they get
// the fp32 row of the table; gradients are stored in T and get T's row.
constexpr Tolerance kLossTol = tolerance_for(DType::kF32);

using CeParam = std::tuple<DType, CeShape>;

class CrossEntropyCuda : public ::testing::TestWithParam<CeParam> {};

template <typename T>
void check_forward(const CeShape& s) {
  const CeCase<T> c(s);
  DeviceArray<T> logits(to_storage<T>(c.logits));
  DeviceArray<int32_t> targets(c.targets);
  DeviceArray<float> losses(static_cast<size_t>(s.N));
  zero::cuda::CudaStream stream;
  // Why: uploads ran on the legacy stream, which the non-blocking test stream does not wait for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cuda::cross_entropy_forward<T>(losses.get(), logits.get(), s.V, targets.get(), s.N, s.V, stream);
  EXPECT_TRUE(all_close(losses.download(), c.want_losses, kLossTol));
}

// Out of place, or in place (dlogits aliasing logits).
template <typename T>
void check_backward(const CeShape& s, bool in_place) {
  const CeCase<T> c(s);
  DeviceArray<T> logits(to_storage<T>(c.logits));
  DeviceArray<T> dlogits(static_cast<size_t>(s.N * s.V));
  DeviceArray<int32_t> targets(c.targets);
  DeviceArray<float> dloss(c.dloss);
  T* out = in_place ? logits.get() : dlogits.get();
  zero::cuda::CudaStream stream;
  // Why: uploads ran on the legacy stream, which the non-blocking test stream does not wait for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cuda::cross_entropy_backward<T>(out, logits.get(), targets.get(), dloss.get(), s.N, s.V, stream);
  const auto got = (in_place ? logits : dlogits).download_f32();
  EXPECT_TRUE(all_close(got, c.want_dlogits, tolerance_for(dtype_of<T>())));
}

// The fused kernel with one dloss for every row; `offset` shifts the logits by that many elements
// so rows lose their 16-byte alignment (the scalar path) when offset is not a multiple of 16 bytes.
template <typename T>
void check_fused(const CeShape& s, int64_t offset) {
  CeCase<T> c(s);
  const float dloss_per_token = static_cast<float>(0.75 * kDlossScale);
  const std::vector<double> logits_d(c.logits.begin(), c.logits.end());
  const std::vector<double> dloss_d(s.N, dloss_per_token);
  std::vector<double> dlogits_d(s.N * s.V);
  cpu::cross_entropy_backward(dlogits_d.data(), logits_d.data(), c.targets.data(), dloss_d.data(),
                              s.N, s.V);
  const std::vector<float> want_dlogits(dlogits_d.begin(), dlogits_d.end());

  std::vector<float> padded(static_cast<size_t>(offset), 0.0f);
  padded.insert(padded.end(), c.logits.begin(), c.logits.end());
  DeviceArray<T> logits(to_storage<T>(padded));
  DeviceArray<int32_t> targets(c.targets);
  DeviceArray<float> losses(static_cast<size_t>(s.N));
  zero::cuda::CudaStream stream;
  // Why: uploads ran on the legacy stream, which the non-blocking test stream does not wait for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cuda::cross_entropy_fused<T>(losses.get(), logits.get() + offset, targets.get(), dloss_per_token,
                               s.N, s.V, stream);
  EXPECT_TRUE(all_close(losses.download(), c.want_losses, kLossTol));
  auto got = logits.download_f32();
  got.erase(got.begin(), got.begin() + offset);
  EXPECT_TRUE(all_close(got, want_dlogits, tolerance_for(dtype_of<T>())));
}

// The (N, V) logits as rows `ld` >= V elements apart, the padding NaN (a kernel that read it would
// show it).
std::vector<float> nan_padded_rows(const std::vector<float>& logits, const CeShape& s, int64_t ld) {
  std::vector<float> padded(static_cast<size_t>(s.N * ld), NAN);
  for (int64_t n = 0; n < s.N; ++n) {
    std::copy_n(logits.begin() + n * s.V, s.V, padded.begin() + n * ld);
  }
  return padded;
}

// The 16-bit gradient of fp32 logits (a 16-bit model's LM head) is bitwise the fp32 kernel's
// output rounded to nearest even, as the two-pass path (fp32 write, then a cast) gives it; rows
// dlogits_ld elements apart keep their padding. `offset` shifts the 16-bit rows off their 16-byte
// alignment (element-by-element stores: the same bits). With `pad_logits` the logits rows are
// 8 elements apart more than V, the padding NaN (never read): the same bits again.
template <typename T16>
void check_backward_16(const CeShape& s, int64_t dlogits_ld, int64_t offset, bool pad_logits) {
  const CeCase<float> c(s);
  const int64_t logits_ld = pad_logits ? s.V + 8 : s.V;
  const std::vector<float> logits_host = nan_padded_rows(c.logits, s, logits_ld);
  DeviceArray<float> logits(c.logits);
  DeviceArray<float> logits_padded(logits_host);
  DeviceArray<float> dlogits(static_cast<size_t>(s.N * s.V));
  DeviceArray<int32_t> targets(c.targets);
  DeviceArray<float> dloss(c.dloss);
  const float kSentinel = 12345.0f;  // exactly representable in both 16-bit types
  const size_t numel16 = static_cast<size_t>(offset + s.N * dlogits_ld);
  DeviceArray<T16> dlogits16(to_storage<T16>(std::vector<float>(numel16, kSentinel)));
  zero::cuda::CudaStream stream;
  // Why: uploads ran on the legacy stream, which the non-blocking test stream does not wait for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cuda::cross_entropy_backward<float>(dlogits.get(), logits.get(), targets.get(), dloss.get(), s.N,
                                      s.V, stream);
  cuda::cross_entropy_backward_16<T16>(dlogits16.get() + offset, dlogits_ld, logits_padded.get(),
                                       logits_ld, targets.get(), dloss.get(), s.N, s.V, stream);
  const std::vector<T16> want = to_storage<T16>(dlogits.download());
  const std::vector<T16> got = dlogits16.download();
  auto bits = [](T16 x) {
    uint16_t b;
    std::memcpy(&b, &x, sizeof(b));
    return b;
  };
  int64_t mismatches = 0;
  for (int64_t n = 0; n < s.N; ++n) {
    for (int64_t v = 0; v < dlogits_ld; ++v) {
      const uint16_t g = bits(got[static_cast<size_t>(offset + n * dlogits_ld + v)]);
      const uint16_t w = v < s.V ? bits(want[static_cast<size_t>(n * s.V + v)])
                                 : bits(to_storage<T16>({kSentinel})[0]);
      if (g != w && mismatches++ < 5)
        ADD_FAILURE() << "n " << n << " v " << v << ": " << g << " != " << w;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// Logits rows padded (a 16-bit model's LM head output, rows rounded up to 8 elements; the padding
// NaN here, never read) give the unpadded losses bit for bit.
template <typename T>
void check_forward_padded(const CeShape& s) {
  const CeCase<T> c(s);
  const int64_t ld = s.V + 8;
  const std::vector<float> padded = nan_padded_rows(c.logits, s, ld);
  DeviceArray<T> logits(to_storage<T>(c.logits));
  DeviceArray<T> logits_padded(to_storage<T>(padded));
  DeviceArray<int32_t> targets(c.targets);
  DeviceArray<float> losses(static_cast<size_t>(s.N)), losses_padded(static_cast<size_t>(s.N));
  zero::cuda::CudaStream stream;
  // Why: uploads ran on the legacy stream, which the non-blocking test stream does not wait for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cuda::cross_entropy_forward<T>(losses.get(), logits.get(), s.V, targets.get(), s.N, s.V, stream);
  cuda::cross_entropy_forward<T>(losses_padded.get(), logits_padded.get(), ld, targets.get(), s.N,
                                 s.V, stream);
  const std::vector<float> want = losses.download(), got = losses_padded.download();
  for (int64_t n = 0; n < s.N; ++n) {
    EXPECT_EQ(std::memcmp(&want[static_cast<size_t>(n)], &got[static_cast<size_t>(n)], 4), 0)
        << "row " << n << ": " << got[static_cast<size_t>(n)]
        << " != " << want[static_cast<size_t>(n)];
  }
}

// Logits rows padded to a multiple of 8 elements (what a 16-bit model's head writes): vector loads
// with a scalar tail when V is not a multiple of the vector, another summation order than the
// dense rows' (scalar) one, so checked against the double reference: the losses (fp32 row of the
// table) and, for 16-bit outputs, the gradient rounded to T (T's row).
template <typename T>
void check_aligned_padded_rows(const CeShape& s) {
  const CeCase<float> c(s);
  const int64_t ld = (s.V + 7) / 8 * 8 + 8;
  const std::vector<float> padded = nan_padded_rows(c.logits, s, ld);
  DeviceArray<float> logits(padded);
  DeviceArray<int32_t> targets(c.targets);
  DeviceArray<float> dloss(c.dloss);
  DeviceArray<float> losses(static_cast<size_t>(s.N));
  zero::cuda::CudaStream stream;
  // Why: uploads ran on the legacy stream, which the non-blocking test stream does not wait for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cuda::cross_entropy_forward<float>(losses.get(), logits.get(), ld, targets.get(), s.N, s.V,
                                     stream);
  EXPECT_TRUE(all_close(losses.download(), c.want_losses, kLossTol));
  if constexpr (!std::is_same_v<T, float>) {
    const int64_t dlogits_ld = (s.V + 7) / 8 * 8;
    DeviceArray<T> dlogits16(static_cast<size_t>(s.N * dlogits_ld));
    cuda::cross_entropy_backward_16<T>(dlogits16.get(), dlogits_ld, logits.get(), ld, targets.get(),
                                       dloss.get(), s.N, s.V, stream);
    const std::vector<float> got_padded = dlogits16.download_f32();
    std::vector<float> got(static_cast<size_t>(s.N * s.V));
    for (int64_t n = 0; n < s.N; ++n) {
      std::copy_n(got_padded.begin() + n * dlogits_ld, s.V, got.begin() + n * s.V);
    }
    EXPECT_TRUE(all_close(got, c.want_dlogits, tolerance_for(dtype_of<T>())));
  }
}

#define ZERO_DISPATCH_DTYPE(dtype, fn, ...)                   \
  switch (dtype) {                                            \
    case DType::kF32: fn<float>(__VA_ARGS__); break;          \
    case DType::kBF16: fn<__nv_bfloat16>(__VA_ARGS__); break; \
    case DType::kF16: fn<__half>(__VA_ARGS__); break;         \
  }

TEST_P(CrossEntropyCuda, ForwardMatchesCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto& [dtype, shape] = GetParam();
  ZERO_DISPATCH_DTYPE(dtype, check_forward, shape);
}

TEST_P(CrossEntropyCuda, ForwardOnPaddedRowsIsBitwiseUnpadded) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto& [dtype, shape] = GetParam();
  ZERO_DISPATCH_DTYPE(dtype, check_forward_padded, shape);
}

TEST_P(CrossEntropyCuda, AlignedPaddedRowsMatchCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto& [dtype, shape] = GetParam();
  ZERO_DISPATCH_DTYPE(dtype, check_aligned_padded_rows, shape);
}

TEST_P(CrossEntropyCuda, BackwardMatchesCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto& [dtype, shape] = GetParam();
  ZERO_DISPATCH_DTYPE(dtype, check_backward, shape, /*in_place=*/false);
}

TEST_P(CrossEntropyCuda, BackwardInPlaceMatchesCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto& [dtype, shape] = GetParam();
  ZERO_DISPATCH_DTYPE(dtype, check_backward, shape, /*in_place=*/true);
}

TEST_P(CrossEntropyCuda, FusedMatchesCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto& [dtype, shape] = GetParam();
  ZERO_DISPATCH_DTYPE(dtype, check_fused, shape, /*offset=*/0);
}

TEST_P(CrossEntropyCuda, FusedMisalignedRowsMatchCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto& [dtype, shape] = GetParam();
  ZERO_DISPATCH_DTYPE(dtype, check_fused, shape, /*offset=*/1);
}

// Rows padded to 8 elements (what the model's operand copy uses), unpadded, and misaligned; the
// logits unpadded and padded.
TEST_P(CrossEntropyCuda, Backward16IsTheRoundedFp32Gradient) {
  ZERO_SKIP_WITHOUT_GPU();
  const auto& [dtype, shape] = GetParam();
  if (dtype == DType::kF32) GTEST_SKIP() << "16-bit outputs only";
  const int64_t padded_ld = (shape.V + 7) / 8 * 8;
  for (const bool pad_logits : {false, true}) {
    for (const auto& [ld, offset] :
         {std::pair{padded_ld, int64_t{0}}, std::pair{shape.V, int64_t{0}},
          std::pair{padded_ld + 8, int64_t{1}}}) {
      SCOPED_TRACE("ld " + std::to_string(ld) + " offset " + std::to_string(offset) +
                   (pad_logits ? " padded logits" : ""));
      if (dtype == DType::kBF16) check_backward_16<__nv_bfloat16>(shape, ld, offset, pad_logits);
      if (dtype == DType::kF16) check_backward_16<__half>(shape, ld, offset, pad_logits);
    }
  }
}

// 1-element and 1xN rows, primes, multiples of the 16-byte pack (4096, 50304, 128256: the
// vectorised path; 64 on the emulator too), GPT-2's 50257 and Llama 3's 128256.
const std::vector<CeShape> kShapes = testing::gpu_or_emulated<CeShape>(
    {
        {1, 1},
        {3, 1},
        {1, 2},
        {7, 31},
        {5, 127},
        {3, 64},
        {4, 257},
        {1, 1031},
        {9, 4096},
        {3, 50257},
        {2, 50304},
        {1, 128256},
        {3, 128256},
    },
    {{1, 1}, {3, 1}, {1, 2}, {7, 31}, {5, 127}, {3, 64}, {4, 257}, {1, 1031}});

std::string param_name(const ::testing::TestParamInfo<CeParam>& info) {
  const auto& [dtype, s] = info.param;
  return std::string(dtype_name(dtype)) + "_N" + std::to_string(s.N) + "_V" + std::to_string(s.V);
}

INSTANTIATE_TEST_SUITE_P(DtypesShapes, CrossEntropyCuda,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16,
                                                              DType::kF16),
                                            ::testing::ValuesIn(kShapes)),
                         param_name);

// Rows whose targets are all ignored give zero losses and zero gradients; a target outside [0, V)
// gives a NaN loss and NaN gradients instead of reading out of bounds.
TEST(CrossEntropyCudaTargets, IgnoredAndInvalidRows) {
  ZERO_SKIP_WITHOUT_GPU();
  const int64_t N = 3, V = 37;
  const std::vector<float> logits_host = to_float(random_vector(N * V, 5));
  const std::vector<int32_t> targets_host = {cpu::kIgnoreIndex, static_cast<int32_t>(V), -1};
  DeviceArray<float> logits(logits_host);
  DeviceArray<int32_t> targets(targets_host);
  DeviceArray<float> losses(N);
  zero::cuda::CudaStream stream;
  // Why: uploads ran on the legacy stream, which the non-blocking test stream does not wait for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cuda::cross_entropy_fused<float>(losses.get(), logits.get(), targets.get(), 1.0f, N, V, stream);
  const auto got_losses = losses.download();
  const auto got_dlogits = logits.download();
  EXPECT_EQ(got_losses[0], 0.0f);
  EXPECT_TRUE(std::isnan(got_losses[1]));
  EXPECT_TRUE(std::isnan(got_losses[2]));
  for (int64_t v = 0; v < V; ++v) {
    EXPECT_EQ(got_dlogits[v], 0.0f) << v;
    EXPECT_TRUE(std::isnan(got_dlogits[V + v])) << v;
    EXPECT_TRUE(std::isnan(got_dlogits[2 * V + v])) << v;
  }
}

// Large logits (offset by 1000, where an fp32 ulp is 6e-5): the loss is shift invariant, so forming
// logsumexp + max first and subtracting the target logit afterwards would lose its last digits.
TEST(CrossEntropyCudaTargets, LargeLogitsKeepTheirDigits) {
  ZERO_SKIP_WITHOUT_GPU();
  const int64_t N = 2, V = 31;
  std::vector<float> logits_host(N * V, 1000.0f);
  logits_host[0 * V + 3] = 1004.0f;  // row 0: the max, and the target just below it
  logits_host[0 * V + 7] = 1003.5f;
  logits_host[1 * V + 30] = 1000.25f;  // row 1: the target is the max
  const std::vector<int32_t> targets_host = {7, 30};
  std::vector<double> want_d(N);
  const std::vector<double> logits_d(logits_host.begin(), logits_host.end());
  cpu::cross_entropy_forward(want_d.data(), logits_d.data(), targets_host.data(), N, V);
  DeviceArray<float> logits(logits_host);
  DeviceArray<int32_t> targets(targets_host);
  DeviceArray<float> losses(N);
  zero::cuda::CudaStream stream;
  // Why: uploads ran on the legacy stream, which the non-blocking test stream does not wait for.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cuda::cross_entropy_forward<float>(losses.get(), logits.get(), V, targets.get(), N, V, stream);
  EXPECT_TRUE(all_close(losses.download(), std::vector<float>(want_d.begin(), want_d.end()),
                        tolerance_for(DType::kF32)));
}

// Gemma 2's final-logit soft-capping: softcap_logits caps the rows in place (the padding of rows
// ld > V apart untouched), and the gradient kernels given the capped logits and the cap return the
// uncapped logits' gradient, against the CPU model's loop (transformer.cc: L = cap tanh(x / cap),
// then the cross-entropy gradient of L times 1 - (L / cap)^2) in double. The cap (3) is within the
// logits' range (-4, 4), so tanh bends most of them. fp32 gradients in place, and bf16 / fp16
// gradients of padded fp32 rows (a 16-bit model's LM head).
TEST(CrossEntropyCudaSoftcap, CappedLogitsAndTheirGradientMatchCpu) {
  ZERO_SKIP_WITHOUT_GPU();
  constexpr double kCap = 3.0;
  for (const CeShape& s : testing::gpu_or_emulated<CeShape>({{1, 1}, {7, 31}, {3, 50257}},
                                                            {{1, 1}, {7, 31}, {4, 257}})) {
    SCOPED_TRACE("N " + std::to_string(s.N) + " V " + std::to_string(s.V));
    const CeCase<float> c(s);  // its logits are the uncapped x; targets and dloss reused
    std::vector<double> capped_d(c.logits.begin(), c.logits.end());
    for (double& x : capped_d) x = kCap * std::tanh(x / kCap);
    const std::vector<double> dloss_d(c.dloss.begin(), c.dloss.end());
    std::vector<double> losses_d(s.N), dlogits_d(s.N * s.V);
    cpu::cross_entropy_forward(losses_d.data(), capped_d.data(), c.targets.data(), s.N, s.V);
    cpu::cross_entropy_backward(dlogits_d.data(), capped_d.data(), c.targets.data(), dloss_d.data(),
                                s.N, s.V);
    for (size_t i = 0; i < dlogits_d.size(); ++i) {
      dlogits_d[i] *= 1.0 - (capped_d[i] / kCap) * (capped_d[i] / kCap);
    }
    const std::vector<float> want_capped(capped_d.begin(), capped_d.end());
    const std::vector<float> want_losses(losses_d.begin(), losses_d.end());
    const std::vector<float> want_dlogits(dlogits_d.begin(), dlogits_d.end());

    const int64_t ld = (s.V + 7) / 8 * 8 + 8;
    const float kPad = 7.0f;  // padding: must stay as it is
    std::vector<float> padded_host(static_cast<size_t>(s.N * ld), kPad);
    for (int64_t n = 0; n < s.N; ++n) {
      std::copy_n(c.logits.begin() + n * s.V, s.V, padded_host.begin() + n * ld);
    }
    DeviceArray<float> logits(c.logits), padded(padded_host), losses(static_cast<size_t>(s.N));
    DeviceArray<int32_t> targets(c.targets);
    DeviceArray<float> dloss(c.dloss);
    DeviceArray<__nv_bfloat16> dlogits_bf16(static_cast<size_t>(s.N * ld));
    DeviceArray<__half> dlogits_f16(static_cast<size_t>(s.N * ld));
    zero::cuda::CudaStream stream;
    // Why: uploads ran on the legacy stream, which the non-blocking test stream does not wait for.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto cap = static_cast<float>(kCap);
    cuda::softcap_logits(logits.get(), s.V, s.N, s.V, cap, stream);
    cuda::softcap_logits(padded.get(), ld, s.N, s.V, cap, stream);
    EXPECT_TRUE(all_close(logits.download(), want_capped, tolerance_for(DType::kF32)));
    cuda::cross_entropy_forward<float>(losses.get(), padded.get(), ld, targets.get(), s.N, s.V,
                                       stream);
    EXPECT_TRUE(all_close(losses.download(), want_losses, kLossTol));
    cuda::cross_entropy_backward_16<__nv_bfloat16>(dlogits_bf16.get(), ld, padded.get(), ld,
                                                   targets.get(), dloss.get(), s.N, s.V, stream,
                                                   cap);
    cuda::cross_entropy_backward_16<__half>(dlogits_f16.get(), ld, padded.get(), ld, targets.get(),
                                            dloss.get(), s.N, s.V, stream, cap);
    cuda::cross_entropy_backward<float>(logits.get(), logits.get(), targets.get(), dloss.get(), s.N,
                                        s.V, stream, cap);
    EXPECT_TRUE(all_close(logits.download(), want_dlogits, tolerance_for(DType::kF32))) << "f32";
    const std::vector<float> padded_after = padded.download();
    const std::vector<float> bf16 = dlogits_bf16.download_f32(), f16 = dlogits_f16.download_f32();
    std::vector<float> got_bf16(static_cast<size_t>(s.N * s.V)), got_f16(got_bf16.size());
    for (int64_t n = 0; n < s.N; ++n) {
      std::copy_n(bf16.begin() + n * ld, s.V, got_bf16.begin() + n * s.V);
      std::copy_n(f16.begin() + n * ld, s.V, got_f16.begin() + n * s.V);
      for (int64_t v = s.V; v < ld; ++v) {
        ASSERT_EQ(padded_after[static_cast<size_t>(n * ld + v)], kPad)
            << "padding " << n << ", " << v;
      }
    }
    EXPECT_TRUE(all_close(got_bf16, want_dlogits, tolerance_for(DType::kBF16))) << "bf16";
    EXPECT_TRUE(all_close(got_f16, want_dlogits, tolerance_for(DType::kF16))) << "f16";
  }
}

}  // namespace
}  // namespace zero::kernels
