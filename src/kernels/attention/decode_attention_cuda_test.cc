// decode_attention (decode_attention_cuda.h) against a double-precision loop over shapes: one new
// row (decode) and several (prefill, also after cached positions), P = 0 and past a chunk of keys,
// GQA (Hkv = Hq, Hq / 2, 1), head dims 1 .. 256 including odd ones, a sliding window, a score
// divisor and Gemma 2's soft-capped scores; each with the keys split over blocks (the scratch) and
// without. Runs on a GPU, and on the CPU emulator as decode_attention_emu_test (small shapes).
// Legend: n new rows, P cached positions before them, Hq / Hkv heads, D head dim. q / y (n, Hq, D);
// k / v caches (capacity, Hkv, D).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/attention/decode_attention_cuda.h"
#include "kernels/cuda_test_util.h"

namespace zero::kernels {
namespace {

using testing::all_close;
using testing::DeviceArray;
using testing::gpu_or_emulated;

struct DecodeShape {
  int64_t n, P, Hq, Hkv, D;
  int64_t window = 0;
  double divisor = 1.0;
  double softcap = 0.0;                           // Gemma 2's attn_logit_softcapping (0: none)
  int64_t capacity() const { return P + n + 3; }  // rows past the attended ones must not matter
};

void PrintTo(const DecodeShape& s, std::ostream* os) {
  *os << "n" << s.n << "_P" << s.P << "_Hq" << s.Hq << "_Hkv" << s.Hkv << "_D" << s.D << "_W"
      << s.window << "_cap" << s.softcap;
}

std::vector<float> random_values(int64_t numel, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
  std::vector<float> v(static_cast<size_t>(numel));
  for (float& x : v) x = dist(rng);
  return v;
}

// The attention of decode_attention_cuda.h's contract, in double.
std::vector<float> reference(const std::vector<float>& q, const std::vector<float>& k,
                             const std::vector<float>& v, const DecodeShape& s) {
  const int64_t G = s.Hq / s.Hkv;
  const double scale = 1.0 / (std::sqrt(static_cast<double>(s.D)) * s.divisor);
  std::vector<float> y(static_cast<size_t>(s.n * s.Hq * s.D));
  for (int64_t i = 0; i < s.n; ++i) {
    for (int64_t h = 0; h < s.Hq; ++h) {
      const int64_t keys = s.P + i + 1;
      const int64_t first = s.window > 0 ? std::max<int64_t>(0, keys - s.window) : 0;
      std::vector<double> score(static_cast<size_t>(keys));
      double max_score = -std::numeric_limits<double>::infinity();
      for (int64_t j = first; j < keys; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < s.D; ++d) {
          dot +=
              static_cast<double>(q[(i * s.Hq + h) * s.D + d]) * k[(j * s.Hkv + h / G) * s.D + d];
        }
        score[j] = dot * scale;
        if (s.softcap > 0) score[j] = s.softcap * std::tanh(score[j] / s.softcap);
        max_score = std::max(max_score, score[j]);
      }
      double sum = 0;
      for (int64_t j = first; j < keys; ++j) sum += std::exp(score[j] - max_score);
      for (int64_t d = 0; d < s.D; ++d) {
        double out = 0;
        for (int64_t j = first; j < keys; ++j) {
          out += std::exp(score[j] - max_score) / sum * v[(j * s.Hkv + h / G) * s.D + d];
        }
        y[(i * s.Hq + h) * s.D + d] = static_cast<float>(out);
      }
    }
  }
  return y;
}

class DecodeAttention : public ::testing::TestWithParam<DecodeShape> {};

TEST_P(DecodeAttention, MatchesDoubleReference) {
  ZERO_SKIP_WITHOUT_GPU();
  const DecodeShape s = GetParam();
  const std::vector<float> q = random_values(s.n * s.Hq * s.D, 1);
  const std::vector<float> k = random_values(s.capacity() * s.Hkv * s.D, 2);
  const std::vector<float> v = random_values(s.capacity() * s.Hkv * s.D, 3);
  DeviceArray<float> dq(q), dk(k), dv(v), dy(q.size());
  DeviceArray<char> scratch(cuda::decode_attention_scratch_bytes(s.D));
  const std::vector<float> want = reference(q, k, v, s);
  // With the scratch, long rows' keys split over blocks; without, one block per (row, head).
  for (void* sc : {static_cast<void*>(scratch.get()), static_cast<void*>(nullptr)}) {
    cuda::decode_attention(dy.get(), dq.get(), dk.get(), dv.get(), s.n, s.P, s.Hq, s.Hkv, s.D, sc,
                           nullptr, s.window, s.divisor, s.softcap);
    EXPECT_TRUE(all_close(dy.download(), want, tolerance_for(DType::kF32)))
        << (sc ? "split keys" : "one block per row and head");
  }
}

// A bf16 cache (16-bit models): the keys and values rounded to bf16 give the reference's attention
// over the rounded values (the widening as they are read is exact), with and without split keys.
TEST_P(DecodeAttention, Bf16CacheMatchesDoubleReferenceOfItsValues) {
  ZERO_SKIP_WITHOUT_GPU();
  const DecodeShape s = GetParam();
  const std::vector<float> q = random_values(s.n * s.Hq * s.D, 1);
  std::vector<float> k = random_values(s.capacity() * s.Hkv * s.D, 2);
  std::vector<float> v = random_values(s.capacity() * s.Hkv * s.D, 3);
  std::vector<uint16_t> k16(k.size()), v16(v.size());
  convert_from_f32(k.data(), k16.data(), DType::kBF16, k.size());
  convert_from_f32(v.data(), v16.data(), DType::kBF16, v.size());
  convert_to_f32(k16.data(), DType::kBF16, k.data(), k.size());  // k, v: the rounded values
  convert_to_f32(v16.data(), DType::kBF16, v.data(), v.size());
  DeviceArray<float> dq(q), dy(q.size());
  DeviceArray<uint16_t> dk(k16), dv(v16);
  DeviceArray<char> scratch(cuda::decode_attention_scratch_bytes(s.D));
  const std::vector<float> want = reference(q, k, v, s);
  for (void* sc : {static_cast<void*>(scratch.get()), static_cast<void*>(nullptr)}) {
    cuda::decode_attention(dy.get(), dq.get(), reinterpret_cast<const __nv_bfloat16*>(dk.get()),
                           reinterpret_cast<const __nv_bfloat16*>(dv.get()), s.n, s.P, s.Hq, s.Hkv,
                           s.D, sc, nullptr, s.window, s.divisor, s.softcap);
    EXPECT_TRUE(all_close(dy.download(), want, tolerance_for(DType::kF32)))
        << (sc ? "split keys" : "one block per row and head");
  }
}

// Scores that grow with the key's position: every later chunk holds a new maximum, so the
// running output and sum must be rescaled (random scores mostly peak in the first chunk).
TEST(DecodeAttention, RescalesWhenALaterChunkHoldsTheMaximum) {
  ZERO_SKIP_WITHOUT_GPU();
  const DecodeShape s{2, 298, 2, 1, 16};
  std::vector<float> q(static_cast<size_t>(s.n * s.Hq * s.D), 1.0f);
  std::vector<float> k = random_values(s.capacity() * s.Hkv * s.D, 2);
  const std::vector<float> v = random_values(s.capacity() * s.Hkv * s.D, 3);
  for (int64_t j = 0; j < s.capacity(); ++j) {
    for (int64_t d = 0; d < s.Hkv * s.D; ++d) {
      k[static_cast<size_t>(j * s.Hkv * s.D + d)] = 0.01f * static_cast<float>(j) + 0.1f * k[d];
    }
  }
  DeviceArray<float> dq(q), dk(k), dv(v), dy(q.size());
  DeviceArray<char> scratch(cuda::decode_attention_scratch_bytes(s.D));
  for (void* sc : {static_cast<void*>(scratch.get()), static_cast<void*>(nullptr)}) {
    cuda::decode_attention(dy.get(), dq.get(), dk.get(), dv.get(), s.n, s.P, s.Hq, s.Hkv, s.D, sc,
                           nullptr);
    EXPECT_TRUE(all_close(dy.download(), reference(q, k, v, s), tolerance_for(DType::kF32)))
        << (sc ? "split keys" : "one block per row and head");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeAttention,
                         ::testing::ValuesIn(gpu_or_emulated<DecodeShape>(
                             {{1, 0, 1, 1, 1},          // one key, D = 1
                              {1, 7, 4, 4, 64},         // decode, multi-head
                              {1, 300, 8, 2, 128},      // decode past two chunks, GQA
                              {1, 200, 4, 1, 80, 137},  // sliding window past a chunk, one kv head
                              {1, 63, 2, 2, 256, 0, 2.0},  // the largest head dim, score divisor
                              {13, 0, 4, 2, 64},           // prefill
                              {5, 61, 6, 3, 3},            // rows after cached ones, odd D
                              {1, 4095, 32, 8, 128},  // a 4096-position context (Llama-3 8B heads)
                              {3, 200, 8, 4, 256, 101, 1.0, 1.5}},  // Gemma 2: capped, window
                             {{1, 0, 1, 1, 1},
                              {1, 7, 2, 2, 8},
                              {1, 150, 2, 1, 40},  // past a chunk of 128 keys, GQA, D past a warp
                              {3, 5, 2, 1, 3, 4},  // rows after cached ones, window
                              {1, 2, 1, 1, 200, 0, 2.0},  // head dim past the block, score divisor
                              {5, 0, 2, 2, 16},           // prefill
                              {1, 300, 2, 1, 8, 137},     // split keys within a window
                              {150, 0, 1, 1, 4},          // split keys, row 0's second split empty
                              // Gemma 2's soft-capped scores (a cap near their size), GQA, window
                              // and divisor, split keys.
                              {2, 150, 2, 1, 16, 140, 0.5, 1.0}})));

}  // namespace
}  // namespace zero::kernels
