// GPT-2 block: x2 = x + proj(attn(ln_1(x))); out = x2 + mlp(ln_2(x2)), mlp = c_proj(gelu(c_fc(.))).
// The forward is shared by training and decoding (block_forward.h); the backward is training's.
// Legend: N = B*T rows, C hidden (H heads × D), F = 4C. Weights in (out, in) layout
// (docs/design.md).
#include <cstring>

#include "kernels/attention/attention.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/gelu/gelu.h"
#include "kernels/layernorm/layernorm.h"
#include "kernels/matmul/matmul.h"
#include "model/block_acts.h"
#include "model/block_forward.h"

namespace zero::model {

namespace k = kernels::cpu;

namespace {

void zero_fill(Tensor& t) { std::memset(t.data(), 0, t.nbytes()); }

// Copies columns [col, col + width) of a (N, row_width) matrix into a dense (N, width) one, or
// back.
void copy_columns(float* dst, const float* src, int64_t N, int64_t src_row, int64_t dst_row,
                  int64_t width) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    std::memcpy(dst + n * dst_row, src + n * src_row, static_cast<size_t>(width) * sizeof(float));
  }
}

}  // namespace

void gpt2_block_forward(const ForwardContext& ctx, const UnitSpec& u, const float* w,
                        const float* x, float* out, const BlockBuffers& b,
                        BlockAttention& attention) {
  const ModelConfig& c = ctx.config;
  const int64_t N = ctx.B * ctx.T, C = c.hidden_size, F = c.intermediate_size;
  const float eps = static_cast<float>(c.norm_eps);
  k::Bf16Gemm* gemm = ctx.bf16_gemm;
  auto W = [&](ParamKind kind) { return w + u.param(kind).offset; };

  k::layernorm_forward(b.norm1, b.mean1, b.rstd1, x, W(ParamKind::kAttnNormWeight),
                       W(ParamKind::kAttnNormBias), N, C, eps);
  k::matmul_forward(b.qkv, b.norm1, W(ParamKind::kQkvWeight), W(ParamKind::kQkvBias), N, C, 3 * C,
                    gemm);
  copy_columns(b.q, b.qkv, N, 3 * C, C, C);
  copy_columns(b.k, b.qkv + C, N, 3 * C, C, C);
  copy_columns(b.v, b.qkv + 2 * C, N, 3 * C, C, C);
  attention.forward(u.block_index, b.q, b.k, b.v, b.attn_y);
  k::matmul_forward(b.x2, b.attn_y, W(ParamKind::kAttnOutWeight), W(ParamKind::kAttnOutBias), N, C,
                    C, gemm);
  k::add(b.x2, b.x2, x, N * C);
  k::layernorm_forward(b.norm2, b.mean2, b.rstd2, b.x2, W(ParamKind::kMlpNormWeight),
                       W(ParamKind::kMlpNormBias), N, C, eps);
  k::matmul_forward(b.up, b.norm2, W(ParamKind::kMlpUpWeight), W(ParamKind::kMlpUpBias), N, C, F,
                    gemm);
  k::gelu_forward(b.act, b.up, N * F);
  k::matmul_forward(out, b.act, W(ParamKind::kMlpDownWeight), W(ParamKind::kMlpDownBias), N, F, C,
                    gemm);
  k::add(out, out, b.x2, N * C);
}

void Transformer::gpt2_block_backward(const UnitSpec& u, const float* w, float* dw, const float* x,
                                      float* dx, BlockActs& a) {
  const ModelConfig& c = layout_.config();
  const int64_t B = B_, T = T_, N = B * T, C = c.hidden_size, F = c.intermediate_size;
  const int64_t H = c.num_heads, D = c.head_dim();
  BlockScratch& s = *scratch_;
  auto W = [&](ParamKind kind) { return w + u.param(kind).offset; };
  auto dW = [&](ParamKind kind) { return dw + u.param(kind).offset; };

  // MLP: dx holds d(out); it is also d(x2) through the residual.
  zero_fill(s.dact);
  k::matmul_backward(s.dact.f32(), dW(ParamKind::kMlpDownWeight), dW(ParamKind::kMlpDownBias), dx,
                     a.act.f32(), W(ParamKind::kMlpDownWeight), N, F, C, bf16_gemm_.get());
  zero_fill(s.dup);
  k::gelu_backward(s.dup.f32(), a.up.f32(), s.dact.f32(), N * F);
  zero_fill(s.dnorm);
  k::matmul_backward(s.dnorm.f32(), dW(ParamKind::kMlpUpWeight), dW(ParamKind::kMlpUpBias),
                     s.dup.f32(), a.norm2.f32(), W(ParamKind::kMlpUpWeight), N, C, F,
                     bf16_gemm_.get());
  k::layernorm_backward(dx, dW(ParamKind::kMlpNormWeight), dW(ParamKind::kMlpNormBias),
                        s.dnorm.f32(), a.x2.f32(), W(ParamKind::kMlpNormWeight), a.mean2.f32(),
                        a.rstd2.f32(), N, C);
  // Attention: dx now holds d(x2), which is also d(x) through the residual.
  zero_fill(s.dattn_y);
  k::matmul_backward(s.dattn_y.f32(), dW(ParamKind::kAttnOutWeight), dW(ParamKind::kAttnOutBias),
                     dx, a.attn_y.f32(), W(ParamKind::kAttnOutWeight), N, C, C, bf16_gemm_.get());
  zero_fill(s.dq);
  zero_fill(s.dk);
  zero_fill(s.dv);
  k::attention_backward(s.dq.f32(), s.dk.f32(), s.dv.f32(), s.dattn_y.f32(), a.att.f32(), a.q.f32(),
                        a.k.f32(), a.v.f32(), B, T, H, H, D,
                        c.attention_score_divisor(u.block_index));
  copy_columns(s.dqkv.f32(), s.dq.f32(), N, C, 3 * C, C);
  copy_columns(s.dqkv.f32() + C, s.dk.f32(), N, C, 3 * C, C);
  copy_columns(s.dqkv.f32() + 2 * C, s.dv.f32(), N, C, 3 * C, C);
  zero_fill(s.dnorm);
  k::matmul_backward(s.dnorm.f32(), dW(ParamKind::kQkvWeight), dW(ParamKind::kQkvBias),
                     s.dqkv.f32(), a.norm1.f32(), W(ParamKind::kQkvWeight), N, C, 3 * C,
                     bf16_gemm_.get());
  k::layernorm_backward(dx, dW(ParamKind::kAttnNormWeight), dW(ParamKind::kAttnNormBias),
                        s.dnorm.f32(), x, W(ParamKind::kAttnNormWeight), a.mean1.f32(),
                        a.rstd1.f32(), N, C);
}

}  // namespace zero::model
