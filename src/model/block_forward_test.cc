// The contracts of the shared block forward (block_forward.h) that its two callers lean on:
// attention is asked once, for the block's own layer, with the block's (rotated) q, k and v; the
// output may overwrite the input and norm2 may share norm1's storage (what KvDecoder does) with
// the same bits as separate buffers (what Transformer does). The math itself is held to PyTorch by
// transformer_test and the decoder to the full forward by kv_decoder_test.
#include "model/block_forward.h"

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/attention/attention.h"
#include "kernels/rope/rope.h"
#include "model/golden_testing.h"

namespace zero::model {
namespace {

// Full causal attention within each sequence (what training does), recording how it was called.
class RecordingAttention final : public BlockAttention {
 public:
  RecordingAttention(const ModelConfig& c, int64_t B, int64_t T)
      : c_(c), B_(B), T_(T), att_(static_cast<size_t>(B * c.num_heads * T * T)) {}
  void forward(int layer, const float* q, const float* k, const float* v, float* y) override {
    calls.push_back({layer, q, k, v, y});
    kernels::cpu::attention_forward(y, att_.data(), q, k, v, B_, T_, c_.num_heads, c_.num_kv_heads,
                                    c_.head_dim(), c_.attention_window(layer),
                                    c_.attention_score_divisor(layer));
  }
  struct Call {
    int layer;
    const float *q, *k, *v;
    float* y;
  };
  std::vector<Call> calls;

 private:
  const ModelConfig& c_;
  int64_t B_, T_;
  std::vector<float> att_;
};

// Storage for every BlockBuffers field; `shared_norms` aliases norm2 / mean2 / rstd2 to norm1's.
struct OwnedBuffers {
  OwnedBuffers(const ModelConfig& c, int64_t N, bool shared_norms) {
    const int64_t C = c.hidden_size, F = c.intermediate_size;
    const int64_t HqD = c.num_heads * c.head_dim(), kv = c.num_kv_heads * c.head_dim();
    auto take = [&](int64_t numel) {
      store.emplace_back(static_cast<size_t>(numel));
      return store.back().data();
    };
    store.reserve(27);
    b = {.norm1 = take(N * C),
         .mean1 = take(N),
         .rstd1 = take(N),
         .qkv = take(N * 3 * C),
         .q = take(N * HqD),
         .k = take(N * kv),
         .v = take(N * kv),
         .q_rot = take(N * HqD),
         .k_rot = take(N * kv),
         .q_rstd = take(N * HqD),
         .k_rstd = take(N * kv),
         .attn_y = take(N * HqD),
         .x2 = take(N * C),
         .norm2 = take(N * C),
         .mean2 = take(N),
         .rstd2 = take(N),
         .gate = take(N * F),
         .up = take(N * F),
         .act = take(N * F),
         .attn_out = take(N * C),
         .rstd_post_attn = take(N),
         .mlp_out = take(N * C),
         .rstd_post_mlp = take(N),
         .gate_act = take(N * F)};
    if (shared_norms) {
      b.norm2 = b.norm1;
      b.mean2 = b.mean1;
      b.rstd2 = b.rstd1;
    }
  }
  std::vector<std::vector<float>> store;
  BlockBuffers b;
};

class BlockForwardTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BlockForwardTest, InPlaceWithSharedNormsEqualsSeparateBuffers) {
  testing::GoldenModel golden = testing::load_golden(GetParam());
  const ModelConfig& c = golden.config;
  ModelLayout layout(c);
  const int64_t B = 2, T = 5, N = B * T, C = c.hidden_size, D = c.head_dim();
  std::vector<float> rope_cos(static_cast<size_t>(T * (D / 2)));
  std::vector<float> rope_sin(rope_cos.size());
  if (c.arch == Arch::kLlama) {
    kernels::cpu::rope_tables(rope_cos.data(), rope_sin.data(),
                              kernels::cpu::rope_inv_freq(D, c.rope_theta, c.rope_scaling, T), T,
                              c.rope_scaling.attention_factor);
  }
  const ForwardContext ctx{
      .config = c, .B = B, .T = T, .rope_cos = rope_cos.data(), .rope_sin = rope_sin.data()};
  std::vector<float> x(static_cast<size_t>(N * C));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 200) / 100.0f - 1.0f;

  for (int layer : {0, static_cast<int>(c.num_layers) - 1}) {
    const int unit = layout.block_unit(layer);
    const UnitSpec& u = layout.unit(unit);
    const float* w = golden.units[static_cast<size_t>(unit)].data();

    OwnedBuffers separate(c, N, /*shared_norms=*/false);
    RecordingAttention attention(c, B, T);
    std::vector<float> out(x.size());
    block_forward(ctx, u, w, x.data(), out.data(), separate.b, attention);
    ASSERT_EQ(attention.calls.size(), 1u);
    const RecordingAttention::Call& call = attention.calls[0];
    EXPECT_EQ(call.layer, layer);
    const bool gpt2 = c.arch == Arch::kGpt2;
    EXPECT_EQ(call.q, gpt2 ? separate.b.q : separate.b.q_rot);
    EXPECT_EQ(call.k, gpt2 ? separate.b.k : separate.b.k_rot);
    EXPECT_EQ(call.v, separate.b.v);
    EXPECT_EQ(call.y, separate.b.attn_y);

    OwnedBuffers shared(c, N, /*shared_norms=*/true);
    RecordingAttention attention2(c, B, T);
    std::vector<float> in_place = x;
    block_forward(ctx, u, w, in_place.data(), in_place.data(), shared.b, attention2);
    EXPECT_EQ(std::memcmp(in_place.data(), out.data(), out.size() * sizeof(float)), 0)
        << "layer " << layer;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, BlockForwardTest,
                         ::testing::Values("gpt2_tiny", "llama_tiny", "gpt2_tiny_by_layer",
                                           "qwen2_tiny_sliding"));

}  // namespace
}  // namespace zero::model
