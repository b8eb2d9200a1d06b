// Llama-family block: x2 = x + o_proj(attn(rope(q), rope(k), v)) over input_layernorm(x);
// out = x2 + down(silu(gate(h)) * up(h)), h = post_attention_layernorm(x2). RMSNorm, GQA, SwiGLU.
// Legend: N = B*T rows, C hidden, F intermediate, Hq/Hkv heads, D head dim.
#include <cstring>

#include "kernels/attention/attention.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/matmul/matmul.h"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/rope/rope.h"
#include "kernels/swiglu/swiglu.h"
#include "model/block_acts.h"

namespace zero::model {

namespace k = kernels::cpu;

namespace {
void zero_fill(Tensor& t) { std::memset(t.data(), 0, t.nbytes()); }
}  // namespace

void Transformer::llama_block_forward(const UnitSpec& u, const float* w, const float* x, float* out,
                                      BlockActs& a) {
  const ModelConfig& c = layout_.config();
  const int64_t B = B_, T = T_, N = B * T, C = c.hidden_size, F = c.intermediate_size;
  const int64_t Hq = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim();
  const float eps = static_cast<float>(c.norm_eps);
  auto W = [&](ParamKind kind) { return w + u.param(kind).offset; };
  auto Wopt = [&](ParamKind kind) -> const float* {
    const ParamSpec* p = u.find(kind);
    return p ? w + p->offset : nullptr;
  };

  k::rmsnorm_forward(a.norm1.f32(), a.rstd1.f32(), x, W(ParamKind::kAttnNormWeight), N, C, eps);
  k::matmul_forward(a.q.f32(), a.norm1.f32(), W(ParamKind::kQWeight), Wopt(ParamKind::kQBias), N, C,
                    Hq * D, bf16_gemm_.get());
  k::matmul_forward(a.k.f32(), a.norm1.f32(), W(ParamKind::kKWeight), Wopt(ParamKind::kKBias), N, C,
                    Hkv * D, bf16_gemm_.get());
  k::matmul_forward(a.v.f32(), a.norm1.f32(), W(ParamKind::kVWeight), Wopt(ParamKind::kVBias), N, C,
                    Hkv * D, bf16_gemm_.get());
  k::rope_forward(a.q_rot.f32(), a.q.f32(), rope_cos_.f32(), rope_sin_.f32(), B, T, Hq, D);
  k::rope_forward(a.k_rot.f32(), a.k.f32(), rope_cos_.f32(), rope_sin_.f32(), B, T, Hkv, D);
  k::attention_forward(a.attn_y.f32(), a.att.f32(), a.q_rot.f32(), a.k_rot.f32(), a.v.f32(), B, T,
                       Hq, Hkv, D, c.attention_window(u.block_index));
  k::matmul_forward(a.x2.f32(), a.attn_y.f32(), W(ParamKind::kAttnOutWeight),
                    Wopt(ParamKind::kAttnOutBias), N, Hq * D, C, bf16_gemm_.get());
  k::add(a.x2.f32(), a.x2.f32(), x, N * C);
  k::rmsnorm_forward(a.norm2.f32(), a.rstd2.f32(), a.x2.f32(), W(ParamKind::kMlpNormWeight), N, C,
                     eps);
  k::matmul_forward(a.gate.f32(), a.norm2.f32(), W(ParamKind::kMlpGateWeight),
                    Wopt(ParamKind::kMlpGateBias), N, C, F, bf16_gemm_.get());
  k::matmul_forward(a.up.f32(), a.norm2.f32(), W(ParamKind::kMlpUpWeight),
                    Wopt(ParamKind::kMlpUpBias), N, C, F, bf16_gemm_.get());
  k::swiglu_forward(a.act.f32(), a.gate.f32(), a.up.f32(), N * F);
  k::matmul_forward(out, a.act.f32(), W(ParamKind::kMlpDownWeight), Wopt(ParamKind::kMlpDownBias),
                    N, F, C, bf16_gemm_.get());
  k::add(out, out, a.x2.f32(), N * C);
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
  zero_fill(s.dnorm);
  k::matmul_backward(s.dnorm.f32(), dW(ParamKind::kQWeight), dWopt(ParamKind::kQBias), s.dq.f32(),
                     a.norm1.f32(), W(ParamKind::kQWeight), N, C, Hq * D, bf16_gemm_.get());
  k::matmul_backward(s.dnorm.f32(), dW(ParamKind::kKWeight), dWopt(ParamKind::kKBias), s.dk.f32(),
                     a.norm1.f32(), W(ParamKind::kKWeight), N, C, Hkv * D, bf16_gemm_.get());
  k::matmul_backward(s.dnorm.f32(), dW(ParamKind::kVWeight), dWopt(ParamKind::kVBias), s.dv.f32(),
                     a.norm1.f32(), W(ParamKind::kVWeight), N, C, Hkv * D, bf16_gemm_.get());
  k::rmsnorm_backward(dx, dW(ParamKind::kAttnNormWeight), s.dnorm.f32(), x,
                      W(ParamKind::kAttnNormWeight), a.rstd1.f32(), N, C);
}

}  // namespace zero::model
