// CudaTransformer's Gemma 2 / Gemma 3 block, forward and backward: gemma_block.cc's math with the
// CUDA kernels, in the same order (the CPU model is the oracle). Every norm is RMSNorm with (1 + w)
// (CudaTransformer::norm_weight); the MLP is GeGLU (tanh GELU of the gate times up). Gemma 3 has
// q_norm / k_norm (config.qk_norm), Gemma 2 not (its soft-capped scores are the attention
// kernels' business). The forward is shared with KV-cached decoding (CudaKvDecoder).
// Legend: N = B*T rows, C hidden, F intermediate, Hq / Hkv heads, D head dim.
#include <cuda_runtime.h>

#include "core/cuda/cuda_check.h"
#include "kernels/elementwise/elementwise_cuda.h"
#include "kernels/gelu/gelu_cuda.h"
#include "kernels/rmsnorm/rmsnorm_cuda.h"
#include "kernels/rope/rope_cuda.h"
#include "model/cuda_transformer.h"
#include "model/cuda_transformer_buffers.h"
#include "model/cuda_transformer_kernels.h"

namespace zero::model {

namespace kc = kernels::cuda;

namespace {

void zero_fill(float* x, int64_t n, cudaStream_t stream) {
  CUDA_ABORT_IF_ERROR(cudaMemsetAsync(x, 0, static_cast<size_t>(n) * sizeof(float), stream));
}

}  // namespace

void CudaTransformer::gemma_block_forward(const CudaForwardContext& ctx, const DeviceUnit& w,
                                          const float* x, float* out, BlockActs& a,
                                          CudaBlockAttention& attention) {
  const ModelConfig& c = ctx.config;
  const int64_t B = ctx.B, T = ctx.T, N = B * T, C = c.hidden_size, F = c.intermediate_size;
  const int64_t Hq = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim();
  const float eps = static_cast<float>(c.norm_eps);
  cudaStream_t s = stream_;
  const UnitSpec& u = *w.spec;
  auto W = [&](ParamKind kind) { return w.f32(kind); };
  auto Wopt = [&](ParamKind kind) { return w.f32_opt(kind); };
  auto norm_w = [&](ParamKind kind, int64_t n) { return norm_weight(W(kind), n); };
  auto dense = [&](float* out_, const float* inp, void* inp16, bool ready, ParamKind weight,
                   const float* bias, int64_t C_, int64_t OC) {
    dense_forward(out_, inp, w, weight, bias, N, C_, OC, inp16 != nullptr ? inp16 : ctx.x16, ready);
  };
  const bool local = c.uses_local_rope(u.block_index);
  const float* cos = local ? ctx.rope_cos_local : ctx.rope_cos;
  const float* sin = local ? ctx.rope_sin_local : ctx.rope_sin;

  kc::rmsnorm_forward<float>(a.norm1, a.rstd1, x, norm_w(ParamKind::kAttnNormWeight, C), N, C, eps,
                             s);
  dense(a.q, a.norm1, a.norm1_16, false, ParamKind::kQWeight, Wopt(ParamKind::kQBias), C, Hq * D);
  dense(a.k, a.norm1, a.norm1_16, true, ParamKind::kKWeight, Wopt(ParamKind::kKBias), C, Hkv * D);
  dense(a.v, a.norm1, a.norm1_16, true, ParamKind::kVWeight, Wopt(ParamKind::kVBias), C, Hkv * D);
  const float* q = a.q;  // RoPE's inputs: the projections, normed per head when qk_norm
  const float* k = a.k;
  if (c.qk_norm) {
    kc::rmsnorm_forward<float>(a.q_rot, a.q_rstd, a.q, norm_w(ParamKind::kQNormWeight, D), N * Hq,
                               D, eps, s);
    kc::rmsnorm_forward<float>(a.k_rot, a.k_rstd, a.k, norm_w(ParamKind::kKNormWeight, D), N * Hkv,
                               D, eps, s);
    q = a.q_rot;
    k = a.k_rot;
  }
  kc::rope_forward<float>(a.q_rot, q, cos, sin, B, T, Hq, D, s);
  kc::rope_forward<float>(a.k_rot, k, cos, sin, B, T, Hkv, D, s);
  attention.forward(u.block_index, a.q_rot, a.k_rot, a.v, a.attn_y);
  dense(a.attn_out, a.attn_y, a.attn_y16, false, ParamKind::kAttnOutWeight,
        Wopt(ParamKind::kAttnOutBias), Hq * D, C);
  kc::rmsnorm_forward<float>(a.x2, a.rstd_post_attn, a.attn_out,
                             norm_w(ParamKind::kPostAttnNormWeight, C), N, C, eps, s);
  kc::add<float>(a.x2, a.x2, x, N * C, s);
  kc::rmsnorm_forward<float>(a.norm2, a.rstd2, a.x2, norm_w(ParamKind::kMlpNormWeight, C), N, C,
                             eps, s);
  dense(a.gate, a.norm2, a.norm2_16, false, ParamKind::kMlpGateWeight,
        Wopt(ParamKind::kMlpGateBias), C, F);
  dense(a.up, a.norm2, a.norm2_16, true, ParamKind::kMlpUpWeight, Wopt(ParamKind::kMlpUpBias), C,
        F);
  kc::gelu_forward<float>(a.gate_act, a.gate, N * F, s);
  cuda_glue::multiply(a.act, a.gate_act, a.up, N * F, s);
  dense(a.mlp_out, a.act, a.act16, false, ParamKind::kMlpDownWeight, Wopt(ParamKind::kMlpDownBias),
        F, C);
  // x was last read above: out may alias it.
  kc::rmsnorm_forward<float>(out, a.rstd_post_mlp, a.mlp_out,
                             norm_w(ParamKind::kPostMlpNormWeight, C), N, C, eps, s);
  kc::add<float>(out, out, a.x2, N * C, s);
}

void CudaTransformer::gemma_block_backward(const DeviceUnit& w, float* dw, const float* x,
                                           float* dx, BlockActs& a) {
  const ModelConfig& c = layout_.config();
  const int64_t B = B_, T = T_, N = B * T, C = c.hidden_size, F = c.intermediate_size;
  const int64_t Hq = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim();
  Buffers& s = *buffers_;
  cudaStream_t st = stream_;
  const UnitSpec& u = *w.spec;
  auto dW = [&](ParamKind kind) { return dw + u.param(kind).offset; };
  auto dWopt = [&](ParamKind kind) -> float* {
    const ParamSpec* p = u.find(kind);
    return p ? dw + p->offset : nullptr;
  };
  // d(1 + w) = d(w): the kernel's weight gradient is the parameter's.
  auto norm_backward = [&](float* dinp, ParamKind kind, const float* dout, const float* inp,
                           const float* rstd, int64_t rows, int64_t n) {
    kc::rmsnorm_backward<float>(dinp, dW(kind), dout, inp, norm_weight(w.f32(kind), n), rstd, rows,
                                n, s.kernel_scratch, s.kernel_scratch_bytes, st);
  };
  const bool local = c.uses_local_rope(u.block_index);
  const float* cos = local ? s.rope_cos_local : s.rope_cos;
  const float* sin = local ? s.rope_sin_local : s.rope_sin;

  // MLP (dx holds d(out); out = x2 + post_ff(mlp_out)).
  zero_fill(s.dpost, N * C, st);
  norm_backward(s.dpost, ParamKind::kPostMlpNormWeight, dx, a.mlp_out, a.rstd_post_mlp, N, C);
  dense_backward(s.dact, dW(ParamKind::kMlpDownWeight), dWopt(ParamKind::kMlpDownBias), s.dpost,
                 a.act, w, ParamKind::kMlpDownWeight, N, F, C, a.act16, /*accumulate_dinp=*/false);
  cuda_glue::multiply(s.dup, s.dact, a.gate_act, N * F, st);  // d(up) = d(act) * gelu(gate)
  cuda_glue::multiply(s.dgelu, s.dact, a.up, N * F, st);      // d(gelu(gate)) = d(act) * up
  zero_fill(s.dgate, N * F, st);
  kc::gelu_backward<float>(s.dgate, a.gate, s.dgelu, N * F, st);
  dense_backward(s.dnorm, dW(ParamKind::kMlpGateWeight), dWopt(ParamKind::kMlpGateBias), s.dgate,
                 a.norm2, w, ParamKind::kMlpGateWeight, N, C, F, a.norm2_16,
                 /*accumulate_dinp=*/false);
  dense_backward(s.dnorm, dW(ParamKind::kMlpUpWeight), dWopt(ParamKind::kMlpUpBias), s.dup, a.norm2,
                 w, ParamKind::kMlpUpWeight, N, C, F, a.norm2_16);
  norm_backward(dx, ParamKind::kMlpNormWeight, s.dnorm, a.x2, a.rstd2, N, C);
  // Attention (dx holds d(x2); x2 = x + post_attn(attn_out)).
  zero_fill(s.dpost, N * C, st);
  norm_backward(s.dpost, ParamKind::kPostAttnNormWeight, dx, a.attn_out, a.rstd_post_attn, N, C);
  dense_backward(s.dattn_y, dW(ParamKind::kAttnOutWeight), dWopt(ParamKind::kAttnOutBias), s.dpost,
                 a.attn_y, w, ParamKind::kAttnOutWeight, N, Hq * D, C, a.attn_y16,
                 /*accumulate_dinp=*/false);
  zero_fill(s.dq, N * Hq * D, st);
  zero_fill(s.dk, N * Hkv * D, st);
  zero_fill(s.dv, N * Hkv * D, st);
  attention_backward(u.block_index, s.dq, s.dk, s.dv, s.dattn_y, a.attn_y, a.lse, a.q_rot, a.k_rot,
                     a.v, Hq, Hkv);
  kc::rope_backward<float>(s.dq, s.dq, cos, sin, B, T, Hq, D, st);
  kc::rope_backward<float>(s.dk, s.dk, cos, sin, B, T, Hkv, D, st);
  const float* dq = s.dq;  // d(q), d(k) of the projections' outputs
  const float* dk = s.dk;
  if (c.qk_norm) {
    zero_fill(s.dq_proj, N * Hq * D, st);
    zero_fill(s.dk_proj, N * Hkv * D, st);
    norm_backward(s.dq_proj, ParamKind::kQNormWeight, s.dq, a.q, a.q_rstd, N * Hq, D);
    norm_backward(s.dk_proj, ParamKind::kKNormWeight, s.dk, a.k, a.k_rstd, N * Hkv, D);
    dq = s.dq_proj;
    dk = s.dk_proj;
  }
  dense_backward(s.dnorm, dW(ParamKind::kQWeight), dWopt(ParamKind::kQBias), dq, a.norm1, w,
                 ParamKind::kQWeight, N, C, Hq * D, a.norm1_16, /*accumulate_dinp=*/false);
  dense_backward(s.dnorm, dW(ParamKind::kKWeight), dWopt(ParamKind::kKBias), dk, a.norm1, w,
                 ParamKind::kKWeight, N, C, Hkv * D, a.norm1_16);
  dense_backward(s.dnorm, dW(ParamKind::kVWeight), dWopt(ParamKind::kVBias), s.dv, a.norm1, w,
                 ParamKind::kVWeight, N, C, Hkv * D, a.norm1_16);
  norm_backward(dx, ParamKind::kAttnNormWeight, s.dnorm, x, a.rstd1, N, C);
}

}  // namespace zero::model
