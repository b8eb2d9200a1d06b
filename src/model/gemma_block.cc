// Gemma 2 / 3 block (post_norms): h = input_layernorm(x); q, k, v projections; (Gemma 3) q_norm /
// k_norm over each head; RoPE (the sliding layers' own tables); attention scaled by
// query_pre_attn_scalar^-1/2; x2 = x + post_attention_layernorm(o_proj(y)); out = x2 +
// post_feedforward_layernorm( down(gelu_tanh(gate(h2)) * up(h2))), h2 =
// pre_feedforward_layernorm(x2). Every norm is RMSNorm applied with (1 + w); Gemma 2's scores are
// soft-capped inside attention. The forward is shared by training and decoding (block_forward.h).
// Legend: N = B*T rows, C hidden, F intermediate, Hq/Hkv heads, D head dim.
#include <cstring>
#include <vector>

#include "kernels/attention/attention.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/gelu/gelu.h"
#include "kernels/matmul/matmul.h"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/rope/rope.h"
#include "model/block_acts.h"
#include "model/block_forward.h"

namespace zero::model {

namespace k = kernels::cpu;

namespace {

void zero_fill(Tensor& t) { std::memset(t.data(), 0, t.nbytes()); }

// act (n) = gate_act * up, GeGLU's product after gate_act = gelu_tanh(gate).
void multiply(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

}  // namespace

void gemma_block_forward(const ForwardContext& ctx, const UnitSpec& u, const float* w,
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
  auto norm_w = [&](ParamKind kind, int64_t n) { return applied_norm_weight(c, W(kind), n); };
  const bool local = c.uses_local_rope(u.block_index);
  const float* cos = (local ? ctx.rope_cos_local : ctx.rope_cos) + ctx.position * (D / 2);
  const float* sin = (local ? ctx.rope_sin_local : ctx.rope_sin) + ctx.position * (D / 2);

  k::rmsnorm_forward(b.norm1, b.rstd1, x, norm_w(ParamKind::kAttnNormWeight, C).data(), N, C, eps);
  k::matmul_forward(b.q, b.norm1, W(ParamKind::kQWeight), Wopt(ParamKind::kQBias), N, C, Hq * D,
                    gemm);
  k::matmul_forward(b.k, b.norm1, W(ParamKind::kKWeight), Wopt(ParamKind::kKBias), N, C, Hkv * D,
                    gemm);
  k::matmul_forward(b.v, b.norm1, W(ParamKind::kVWeight), Wopt(ParamKind::kVBias), N, C, Hkv * D,
                    gemm);
  const float* q = b.q;  // what RoPE rotates: Gemma 3 normalises each head first, Gemma 2 not
  const float* k = b.k;
  if (c.qk_norm) {
    k::rmsnorm_forward(b.q_rot, b.q_rstd, b.q, norm_w(ParamKind::kQNormWeight, D).data(), N * Hq, D,
                       eps);
    k::rmsnorm_forward(b.k_rot, b.k_rstd, b.k, norm_w(ParamKind::kKNormWeight, D).data(), N * Hkv,
                       D, eps);
    q = b.q_rot;
    k = b.k_rot;
  }
  k::rope_forward(b.q_rot, q, cos, sin, B, T, Hq, D);
  k::rope_forward(b.k_rot, k, cos, sin, B, T, Hkv, D);
  attention.forward(u.block_index, b.q_rot, b.k_rot, b.v, b.attn_y);
  k::matmul_forward(b.attn_out, b.attn_y, W(ParamKind::kAttnOutWeight),
                    Wopt(ParamKind::kAttnOutBias), N, Hq * D, C, gemm);
  k::rmsnorm_forward(b.x2, b.rstd_post_attn, b.attn_out,
                     norm_w(ParamKind::kPostAttnNormWeight, C).data(), N, C, eps);
  k::add(b.x2, b.x2, x, N * C);
  k::rmsnorm_forward(b.norm2, b.rstd2, b.x2, norm_w(ParamKind::kMlpNormWeight, C).data(), N, C,
                     eps);
  k::matmul_forward(b.gate, b.norm2, W(ParamKind::kMlpGateWeight), Wopt(ParamKind::kMlpGateBias), N,
                    C, F, gemm);
  k::matmul_forward(b.up, b.norm2, W(ParamKind::kMlpUpWeight), Wopt(ParamKind::kMlpUpBias), N, C, F,
                    gemm);
  k::gelu_forward(b.gate_act, b.gate, N * F);
  multiply(b.act, b.gate_act, b.up, N * F);
  k::matmul_forward(b.mlp_out, b.act, W(ParamKind::kMlpDownWeight), Wopt(ParamKind::kMlpDownBias),
                    N, F, C, gemm);
  // x was last read above: out may alias it.
  k::rmsnorm_forward(out, b.rstd_post_mlp, b.mlp_out,
                     norm_w(ParamKind::kPostMlpNormWeight, C).data(), N, C, eps);
  k::add(out, out, b.x2, N * C);
}

void Transformer::gemma_block_backward(const UnitSpec& u, const float* w, float* dw, const float* x,
                                       float* dx, BlockActs& a) {
  const ModelConfig& c = layout_.config();
  const int64_t B = B_, T = T_, N = B * T, C = c.hidden_size, F = c.intermediate_size;
  const int64_t Hq = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim();
  BlockScratch& s = *scratch_;
  k::Bf16Gemm* gemm = bf16_gemm_.get();
  auto W = [&](ParamKind kind) { return w + u.param(kind).offset; };
  auto dW = [&](ParamKind kind) { return dw + u.param(kind).offset; };
  auto dWopt = [&](ParamKind kind) -> float* {
    const ParamSpec* p = u.find(kind);
    return p ? dw + p->offset : nullptr;
  };
  auto norm_w = [&](ParamKind kind, int64_t n) { return applied_norm_weight(c, W(kind), n); };
  // d(1 + w) = d(w): the kernels' weight gradient is the parameter's.
  auto norm_backward = [&](float* dinp, ParamKind kind, const float* dout, const float* inp,
                           const float* rstd, int64_t rows, int64_t n) {
    k::rmsnorm_backward(dinp, dW(kind), dout, inp, norm_w(kind, n).data(), rstd, rows, n);
  };
  const bool local = c.uses_local_rope(u.block_index);
  const float* cos = local ? rope_cos_local_.f32() : rope_cos_.f32();
  const float* sin = local ? rope_sin_local_.f32() : rope_sin_.f32();

  // MLP (dx holds d(out); out = x2 + post_ff(mlp_out)).
  zero_fill(s.dpost);
  norm_backward(s.dpost.f32(), ParamKind::kPostMlpNormWeight, dx, a.mlp_out.f32(),
                a.rstd_post_mlp.f32(), N, C);
  zero_fill(s.dact);
  k::matmul_backward(s.dact.f32(), dW(ParamKind::kMlpDownWeight), dWopt(ParamKind::kMlpDownBias),
                     s.dpost.f32(), a.act.f32(), W(ParamKind::kMlpDownWeight), N, F, C, gemm);
  multiply(s.dup.f32(), s.dact.f32(), a.gate_act.f32(), N * F);  // d(up) = d(act) * gelu(gate)
  multiply(s.dgelu.f32(), s.dact.f32(), a.up.f32(), N * F);      // d(gelu(gate)) = d(act) * up
  zero_fill(s.dgate);
  k::gelu_backward(s.dgate.f32(), a.gate.f32(), s.dgelu.f32(), N * F);
  zero_fill(s.dnorm);
  k::matmul_backward(s.dnorm.f32(), dW(ParamKind::kMlpGateWeight), dWopt(ParamKind::kMlpGateBias),
                     s.dgate.f32(), a.norm2.f32(), W(ParamKind::kMlpGateWeight), N, C, F, gemm);
  k::matmul_backward(s.dnorm.f32(), dW(ParamKind::kMlpUpWeight), dWopt(ParamKind::kMlpUpBias),
                     s.dup.f32(), a.norm2.f32(), W(ParamKind::kMlpUpWeight), N, C, F, gemm);
  norm_backward(dx, ParamKind::kMlpNormWeight, s.dnorm.f32(), a.x2.f32(), a.rstd2.f32(), N, C);
  // Attention (dx holds d(x2); x2 = x + post_attn(attn_out)).
  zero_fill(s.dpost);
  norm_backward(s.dpost.f32(), ParamKind::kPostAttnNormWeight, dx, a.attn_out.f32(),
                a.rstd_post_attn.f32(), N, C);
  zero_fill(s.dattn_y);
  k::matmul_backward(s.dattn_y.f32(), dW(ParamKind::kAttnOutWeight), dWopt(ParamKind::kAttnOutBias),
                     s.dpost.f32(), a.attn_y.f32(), W(ParamKind::kAttnOutWeight), N, Hq * D, C,
                     gemm);
  zero_fill(s.dq);
  zero_fill(s.dk);
  zero_fill(s.dv);
  k::attention_backward(s.dq.f32(), s.dk.f32(), s.dv.f32(), s.dattn_y.f32(), a.att.f32(),
                        a.q_rot.f32(), a.k_rot.f32(), a.v.f32(), B, T, Hq, Hkv, D,
                        c.attention_score_divisor(u.block_index), c.attn_logit_softcapping);
  k::rope_backward(s.dq.f32(), s.dq.f32(), cos, sin, B, T, Hq, D);
  k::rope_backward(s.dk.f32(), s.dk.f32(), cos, sin, B, T, Hkv, D);
  const float* dq = s.dq.f32();  // d(q), d(k) of the projections' outputs
  const float* dk = s.dk.f32();
  if (c.qk_norm) {
    zero_fill(s.dq_proj);
    zero_fill(s.dk_proj);
    norm_backward(s.dq_proj.f32(), ParamKind::kQNormWeight, s.dq.f32(), a.q.f32(), a.q_rstd.f32(),
                  N * Hq, D);
    norm_backward(s.dk_proj.f32(), ParamKind::kKNormWeight, s.dk.f32(), a.k.f32(), a.k_rstd.f32(),
                  N * Hkv, D);
    dq = s.dq_proj.f32();
    dk = s.dk_proj.f32();
  }
  zero_fill(s.dnorm);
  k::matmul_backward(s.dnorm.f32(), dW(ParamKind::kQWeight), dWopt(ParamKind::kQBias), dq,
                     a.norm1.f32(), W(ParamKind::kQWeight), N, C, Hq * D, gemm);
  k::matmul_backward(s.dnorm.f32(), dW(ParamKind::kKWeight), dWopt(ParamKind::kKBias), dk,
                     a.norm1.f32(), W(ParamKind::kKWeight), N, C, Hkv * D, gemm);
  k::matmul_backward(s.dnorm.f32(), dW(ParamKind::kVWeight), dWopt(ParamKind::kVBias), s.dv.f32(),
                     a.norm1.f32(), W(ParamKind::kVWeight), N, C, Hkv * D, gemm);
  norm_backward(dx, ParamKind::kAttnNormWeight, s.dnorm.f32(), x, a.rstd1.f32(), N, C);
}

}  // namespace zero::model
