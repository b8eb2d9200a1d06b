// Llama-family block: x2 = x + o_proj(attn(rope(q), rope(k), v)) over input_layernorm(x);
// out = x2 + down(silu(gate(h)) * up(h)), h = post_attention_layernorm(x2). RMSNorm, GQA, SwiGLU.
// Qwen3 (config.qk_norm): q and k pass an RMSNorm over each head's D values before RoPE.
// The forward is shared by training and decoding (block_forward.h); the backward is training's.
// Legend: N = B*T rows, C hidden, F intermediate, Hq/Hkv heads, D head dim.
#include <cstring>

#include "kernels/attention/attention.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/matmul/matmul.h"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/rope/rope.h"
#include "kernels/swiglu/swiglu.h"
#include "model/block_acts.h"
#include "model/block_forward.h"

namespace zero::model {

namespace k = kernels::cpu;

namespace {
void zero_fill(Tensor& t) { std::memset(t.data(), 0, t.nbytes()); }
}  // namespace

void llama_block_forward(const ForwardContext& ctx, const UnitSpec& u, const float* w,
                         const float* x, float* out, const BlockBuffers& b,
                         BlockAttention& attention) {
  const ModelConfig& c = ctx.config;
  const int64_t B = ctx.B, T = ctx.T, N = B * T, C = c.hidden_size, F = c.intermediate_size;
  const int64_t Hq = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim();
  const float eps = static_cast<float>(c.norm_eps);
  k::Bf16Gemm* gemm = ctx.bf16_gemm;
  auto W = [&](ParamKind kind) { return w + u.param(kind).offset; };
  auto Wopt = [&](ParamKind kind) -> const float* {
    const ParamSpec* p = u.find(kind);
    return p ? w + p->offset : nullptr;
  };
  // RoPE at the rows' absolute positions: the tables from row ctx.position on.
  const float* cos = ctx.rope_cos + ctx.position * (D / 2);
  const float* sin = ctx.rope_sin + ctx.position * (D / 2);

  k::rmsnorm_forward(b.norm1, b.rstd1, x, W(ParamKind::kAttnNormWeight), N, C, eps);
  k::matmul_forward(b.q, b.norm1, W(ParamKind::kQWeight), Wopt(ParamKind::kQBias), N, C, Hq * D,
                    gemm);
  k::matmul_forward(b.k, b.norm1, W(ParamKind::kKWeight), Wopt(ParamKind::kKBias), N, C, Hkv * D,
                    gemm);
  k::matmul_forward(b.v, b.norm1, W(ParamKind::kVWeight), Wopt(ParamKind::kVBias), N, C, Hkv * D,
                    gemm);
  if (c.qk_norm) {
    // Qwen3: each (row, head) vector of D values is one RMSNorm row; normalised into q_rot / k_rot,
    // which RoPE then rotates in place.
    k::rmsnorm_forward(b.q_rot, b.q_rstd, b.q, W(ParamKind::kQNormWeight), N * Hq, D, eps);
    k::rmsnorm_forward(b.k_rot, b.k_rstd, b.k, W(ParamKind::kKNormWeight), N * Hkv, D, eps);
    k::rope_forward(b.q_rot, b.q_rot, cos, sin, B, T, Hq, D);
    k::rope_forward(b.k_rot, b.k_rot, cos, sin, B, T, Hkv, D);
  } else {
    k::rope_forward(b.q_rot, b.q, cos, sin, B, T, Hq, D);
    k::rope_forward(b.k_rot, b.k, cos, sin, B, T, Hkv, D);
  }
  attention.forward(u.block_index, b.q_rot, b.k_rot, b.v, b.attn_y);
  k::matmul_forward(b.x2, b.attn_y, W(ParamKind::kAttnOutWeight), Wopt(ParamKind::kAttnOutBias), N,
                    Hq * D, C, gemm);
  k::add(b.x2, b.x2, x, N * C);
  k::rmsnorm_forward(b.norm2, b.rstd2, b.x2, W(ParamKind::kMlpNormWeight), N, C, eps);
  k::matmul_forward(b.gate, b.norm2, W(ParamKind::kMlpGateWeight), Wopt(ParamKind::kMlpGateBias), N,
                    C, F, gemm);
  k::matmul_forward(b.up, b.norm2, W(ParamKind::kMlpUpWeight), Wopt(ParamKind::kMlpUpBias), N, C, F,
                    gemm);
  k::swiglu_forward(b.act, b.gate, b.up, N * F);
  k::matmul_forward(out, b.act, W(ParamKind::kMlpDownWeight), Wopt(ParamKind::kMlpDownBias), N, F,
                    C, gemm);
  k::add(out, out, b.x2, N * C);
}

void Transformer::llama_block_backward(const UnitSpec& u, const float* w, float* dw, const float* x,
                                       float* dx, BlockActs& a) {
  const ModelConfig& c = layout_.config();
  const int64_t B = B_, T = T_, N = B * T, C = c.hidden_size, F = c.intermediate_size;
  const int64_t Hq = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim();
  BlockScratch& s = *scratch_;
  auto W = [&](ParamKind kind) { return w + u.param(kind).offset; };
  auto dWopt = [&](ParamKind kind) -> float* {
    const ParamSpec* p = u.find(kind);
    return p ? dw + p->offset : nullptr;
  };
  auto dW = [&](ParamKind kind) { return dw + u.param(kind).offset; };

  // MLP (dx holds d(out) = d(x2) through the residual).
  zero_fill(s.dact);
  k::matmul_backward(s.dact.f32(), dW(ParamKind::kMlpDownWeight), dWopt(ParamKind::kMlpDownBias),
                     dx, a.act.f32(), W(ParamKind::kMlpDownWeight), N, F, C, bf16_gemm_.get());
  zero_fill(s.dgate);
  zero_fill(s.dup);
  k::swiglu_backward(s.dgate.f32(), s.dup.f32(), s.dact.f32(), a.gate.f32(), a.up.f32(), N * F);
  zero_fill(s.dnorm);
  k::matmul_backward(s.dnorm.f32(), dW(ParamKind::kMlpGateWeight), dWopt(ParamKind::kMlpGateBias),
                     s.dgate.f32(), a.norm2.f32(), W(ParamKind::kMlpGateWeight), N, C, F,
                     bf16_gemm_.get());
  k::matmul_backward(s.dnorm.f32(), dW(ParamKind::kMlpUpWeight), dWopt(ParamKind::kMlpUpBias),
                     s.dup.f32(), a.norm2.f32(), W(ParamKind::kMlpUpWeight), N, C, F,
                     bf16_gemm_.get());
  k::rmsnorm_backward(dx, dW(ParamKind::kMlpNormWeight), s.dnorm.f32(), a.x2.f32(),
                      W(ParamKind::kMlpNormWeight), a.rstd2.f32(), N, C);
  // Attention (dx holds d(x2) = d(x) through the residual).
  zero_fill(s.dattn_y);
  k::matmul_backward(s.dattn_y.f32(), dW(ParamKind::kAttnOutWeight), dWopt(ParamKind::kAttnOutBias),
                     dx, a.attn_y.f32(), W(ParamKind::kAttnOutWeight), N, Hq * D, C,
                     bf16_gemm_.get());
  zero_fill(s.dq);
  zero_fill(s.dk);
  zero_fill(s.dv);
  k::attention_backward(s.dq.f32(), s.dk.f32(), s.dv.f32(), s.dattn_y.f32(), a.att.f32(),
                        a.q_rot.f32(), a.k_rot.f32(), a.v.f32(), B, T, Hq, Hkv, D);
  // Undo the rotation in place: the gradients become d(q), d(k) before RoPE.
  k::rope_backward(s.dq.f32(), s.dq.f32(), rope_cos_.f32(), rope_sin_.f32(), B, T, Hq, D);
  k::rope_backward(s.dk.f32(), s.dk.f32(), rope_cos_.f32(), rope_sin_.f32(), B, T, Hkv, D);
  const float* dq = s.dq.f32();  // d(q), d(k) of the projections' outputs
  const float* dk = s.dk.f32();
  if (c.qk_norm) {
    zero_fill(s.dq_proj);
    zero_fill(s.dk_proj);
    k::rmsnorm_backward(s.dq_proj.f32(), dW(ParamKind::kQNormWeight), s.dq.f32(), a.q.f32(),
                        W(ParamKind::kQNormWeight), a.q_rstd.f32(), N * Hq, D);
    k::rmsnorm_backward(s.dk_proj.f32(), dW(ParamKind::kKNormWeight), s.dk.f32(), a.k.f32(),
                        W(ParamKind::kKNormWeight), a.k_rstd.f32(), N * Hkv, D);
    dq = s.dq_proj.f32();
    dk = s.dk_proj.f32();
  }
  zero_fill(s.dnorm);
  k::matmul_backward(s.dnorm.f32(), dW(ParamKind::kQWeight), dWopt(ParamKind::kQBias), dq,
                     a.norm1.f32(), W(ParamKind::kQWeight), N, C, Hq * D, bf16_gemm_.get());
  k::matmul_backward(s.dnorm.f32(), dW(ParamKind::kKWeight), dWopt(ParamKind::kKBias), dk,
                     a.norm1.f32(), W(ParamKind::kKWeight), N, C, Hkv * D, bf16_gemm_.get());
  k::matmul_backward(s.dnorm.f32(), dW(ParamKind::kVWeight), dWopt(ParamKind::kVBias), s.dv.f32(),
                     a.norm1.f32(), W(ParamKind::kVWeight), N, C, Hkv * D, bf16_gemm_.get());
  k::rmsnorm_backward(dx, dW(ParamKind::kAttnNormWeight), s.dnorm.f32(), x,
                      W(ParamKind::kAttnNormWeight), a.rstd1.f32(), N, C);
}

}  // namespace zero::model
