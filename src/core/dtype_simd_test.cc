// The vectorised bf16 conversions (dtype_simd.h) against the scalar ones, bit for bit: every bf16
// pattern with low halves that hit each rounding case (ties, NaN payloads, carries into inf,
// subnormals), random bits, and lengths that leave every tail size.
#include "core/dtype_simd.h"

#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/dtype.h"

namespace zero::detail {
namespace {

// Every upper half (sign, exponent, 7 mantissa bits) with low halves below, above and at the tie
// of each rounding direction, then random patterns.
std::vector<float> special_and_random_floats() {
  std::vector<uint32_t> bits;
  const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff};
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint32_t lo : lows) bits.push_back(hi << 16 | lo);
  }
  std::mt19937 rng(14);
  for (int i = 0; i < 100000; ++i) bits.push_back(static_cast<uint32_t>(rng()));
  std::vector<float> out(bits.size());
  std::memcpy(out.data(), bits.data(), bits.size() * 4);
  return out;
}

std::vector<DTypeIsa> supported_vector_isas() {
  std::vector<DTypeIsa> isas;
  for (DTypeIsa isa : {DTypeIsa::kAvx2, DTypeIsa::kAvx512}) {
    if (dtype_isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

const char* isa_name(DTypeIsa isa) {
  return isa == DTypeIsa::kAvx512 ? "avx512" : isa == DTypeIsa::kAvx2 ? "avx2" : "scalar";
}

// Byte-wise equality: NaN patterns must match too.
template <typename T>
void expect_same_bits(const std::vector<T>& got, const std::vector<T>& want, const char* what,
                      DTypeIsa isa, size_t n) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      uint32_t g = 0, w = 0;
      std::memcpy(&g, &got[i], sizeof(T));
      std::memcpy(&w, &want[i], sizeof(T));
      FAIL() << what << " " << isa_name(isa) << " n=" << n << " i=" << i << std::hex << " got 0x"
             << g << " want 0x" << w;
    }
  }
}

TEST(DTypeSimd, ScalarSetMatchesDTypeH) {
  const std::vector<float> x = special_and_random_floats();
  const Bf16BulkFns& s = bf16_bulk_fns(DTypeIsa::kScalar);
  std::vector<uint16_t> h(x.size());
  std::vector<float> r(x.size());
  s.from_f32(x.data(), h.data(), x.size());
  s.round(x.data(), r.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(h[i], float_to_bf16(x[i]).bits) << i;
    const float want = round_to_bf16(x[i]);
    ASSERT_EQ(std::memcmp(&r[i], &want, 4), 0) << i;
  }
}

TEST(DTypeSimd, VectorSetsMatchScalarOnEveryPattern) {
  const std::vector<float> x = special_and_random_floats();
  const size_t n = x.size();
  const Bf16BulkFns& scalar = bf16_bulk_fns(DTypeIsa::kScalar);
  std::vector<uint16_t> want_h(n), got_h(n);
  std::vector<float> want_f(n), got_f(n);
  std::vector<uint16_t> all_bf16(65536);
  for (uint32_t b = 0; b < 65536; ++b) all_bf16[b] = static_cast<uint16_t>(b);
  std::vector<float> want_w(65536), got_w(65536);
  scalar.to_f32(all_bf16.data(), want_w.data(), all_bf16.size());
  // Accumulators: a mix of magnitudes so the add rounds in every way.
  std::vector<float> acc0(n);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& a : acc0) a = normal(rng);
  if (supported_vector_isas().empty()) GTEST_SKIP() << "no AVX2 / AVX-512 on this CPU";
  for (DTypeIsa isa : supported_vector_isas()) {
    const Bf16BulkFns& v = bf16_bulk_fns(isa);
    scalar.from_f32(x.data(), want_h.data(), n);
    v.from_f32(x.data(), got_h.data(), n);
    expect_same_bits(got_h, want_h, "from_f32", isa, n);

    v.to_f32(all_bf16.data(), got_w.data(), all_bf16.size());
    expect_same_bits(got_w, want_w, "to_f32", isa, all_bf16.size());

    scalar.round(x.data(), want_f.data(), n);
    v.round(x.data(), got_f.data(), n);
    expect_same_bits(got_f, want_f, "round", isa, n);
    got_f = x;  // in place
    v.round(got_f.data(), got_f.data(), n);
    expect_same_bits(got_f, want_f, "round in place", isa, n);

    want_f = acc0;
    got_f = acc0;
    scalar.accumulate_rounded(want_f.data(), x.data(), n);
    v.accumulate_rounded(got_f.data(), x.data(), n);
    expect_same_bits(got_f, want_f, "accumulate_rounded", isa, n);
  }
}

TEST(DTypeSimd, EveryTailLength) {
  // Lengths 0..40 from an offset start (unaligned), so each vector width leaves every tail.
  const std::vector<float> x = special_and_random_floats();
  const Bf16BulkFns& scalar = bf16_bulk_fns(DTypeIsa::kScalar);
  for (DTypeIsa isa : supported_vector_isas()) {
    const Bf16BulkFns& v = bf16_bulk_fns(isa);
    for (size_t n = 0; n <= 40; ++n) {
      const float* src = x.data() + 65536 * 7 - 20 + 3;  // the last patterns, then random ones
      std::vector<uint16_t> want_h(n + 1, 0xabcd), got_h(n + 1, 0xabcd);
      scalar.from_f32(src, want_h.data(), n);
      v.from_f32(src, got_h.data(), n);
      expect_same_bits(got_h, want_h, "from_f32", isa, n + 1);  // n + 1: nothing written past n
      std::vector<float> want_f(n + 1, 3.0f), got_f(n + 1, 3.0f);
      scalar.round(src, want_f.data(), n);
      v.round(src, got_f.data(), n);
      expect_same_bits(got_f, want_f, "round", isa, n + 1);
      std::vector<float> wide_want(n + 1, 5.0f), wide_got(n + 1, 5.0f);
      scalar.to_f32(want_h.data(), wide_want.data(), n);
      v.to_f32(want_h.data(), wide_got.data(), n);
      expect_same_bits(wide_got, wide_want, "to_f32", isa, n + 1);
    }
  }
}

TEST(DTypeSimd, BulkEntryPointsMatchScalar) {
  // The public entry points (dispatching to the best set) on all dtypes.
  const std::vector<float> x = special_and_random_floats();
  const size_t n = x.size();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<float> r(n), acc(n, 1.0f);
    round_to_dtype(x.data(), r.data(), n, dtype);
    accumulate_rounded(acc.data(), x.data(), n, dtype);
    std::vector<char> wire(n * dtype_bytes(dtype));
    std::vector<float> back(n);
    convert_from_f32(x.data(), wire.data(), dtype, n);
    convert_to_f32(wire.data(), dtype, back.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const float want = round_to_dtype(x[i], dtype);
      const float want_acc = 1.0f + want;
      ASSERT_EQ(std::memcmp(&r[i], &want, 4), 0) << dtype_name(dtype) << " " << i;
      ASSERT_EQ(std::memcmp(&acc[i], &want_acc, 4), 0) << dtype_name(dtype) << " " << i;
      if (dtype == DType::kBF16) {  // f16 NaNs become the canonical one: compare values only
        ASSERT_EQ(std::memcmp(&back[i], &want, 4), 0) << i;
      }
    }
  }
}

}  // namespace
}  // namespace zero::detail
