// CudaTransformer's blocks, forward and backward: gpt2_block.cc and llama_block.cc's math with the
// CUDA kernels, in the same order (the CPU model is the oracle). The forward is shared with
// KV-cached decoding (CudaKvDecoder): it takes its rows' shape and attention from the caller.
// Legend: N = B*T rows, C hidden, F intermediate, Hq / Hkv heads, D head dim. Weights in (out, in)
// layout (docs/design.md). The dense layers go through dense_forward / dense_backward (end of
// file): fp32 GEMMs for fp32 units, autocast-style 16-bit GEMMs for 16-bit ones.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/dtype.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/cross_entropy/cross_entropy_cuda.h"
#include "kernels/elementwise/elementwise_cuda.h"
#include "kernels/encoder/encoder_cuda.h"
#include "kernels/gelu/gelu_cuda.h"
#include "kernels/layernorm/layernorm_cuda.h"
#include "kernels/matmul/matmul_cuda.h"
#include "kernels/rmsnorm/rmsnorm_cuda.h"
#include "kernels/rope/rope_cuda.h"
#include "kernels/swiglu/swiglu_cuda.h"
#include "model/cuda_transformer.h"
#include "model/cuda_transformer_buffers.h"
#include "model/cuda_transformer_kernels.h"

namespace zero::model {

namespace kc = kernels::cuda;

namespace {

void zero_fill(float* x, int64_t n, cudaStream_t stream) {
  CUDA_ABORT_IF_ERROR(cudaMemsetAsync(x, 0, static_cast<size_t>(n) * sizeof(float), stream));
}

int64_t round_up_8(int64_t n) { return (n + 7) / 8 * 8; }

// The 16-bit LM head's vocabulary split (head_forward, head_backward): rows [0, V rounded down to
// 8) in the large GEMM with 16-byte extents, the < 8 left in a small one.
int64_t head_vocab_main(int64_t V) { return V / 8 * 8; }

// f.template operator()<T16>() for the 16-bit dtype's CUDA type.
template <typename F>
void with_16bit(DType dtype, F&& f) {
  if (dtype == DType::kBF16) {
    f.template operator()<__nv_bfloat16>();
  } else {
    ZERO_CHECK(dtype == DType::kF16, "not a 16-bit dtype: ", dtype_name(dtype));
    f.template operator()<__half>();
  }
}

// Attention's 16-bit copies, carved from Buffers::attention16 as attention16_bytes sizes them.
template <typename T16>
struct Attention16Views {
  T16 *q, *dy, *dq, *k, *v, *dk, *dv;
};

template <typename T16>
Attention16Views<T16> attention16_views(DeviceScratch& scratch, int64_t nq, int64_t nkv) {
  auto rounded = [](int64_t n) { return static_cast<size_t>((n * 2 + 255) / 256 * 256); };
  char* p = scratch.ensure(3 * rounded(nq) + 4 * rounded(nkv));
  auto take = [&](int64_t n) {
    T16* v = reinterpret_cast<T16*>(p);
    p += rounded(n);
    return v;
  };
  Attention16Views<T16> a;
  a.q = take(nq);
  a.dy = take(nq);
  a.dq = take(nq);
  a.k = take(nkv);
  a.v = take(nkv);
  a.dk = take(nkv);
  a.dv = take(nkv);
  return a;
}

template <typename T16>
void attention16_forward(DeviceScratch& scratch, float* y, float* lse, const float* q,
                         const float* k, const float* v, int64_t B, int64_t T, int64_t Hq,
                         int64_t Hkv, int64_t D, int64_t window, double divisor, double softcap,
                         cudaStream_t s) {
  const int64_t nq = B * T * Hq * D, nkv = B * T * Hkv * D;
  const Attention16Views<T16> a = attention16_views<T16>(scratch, nq, nkv);
  kc::cast(q, a.q, nq, s);
  kc::cast(k, a.k, nkv, s);
  kc::cast(v, a.v, nkv, s);
  // The output goes through dq's slot (free in the forward).
  kc::attention_forward<T16>(a.dq, lse, a.q, a.k, a.v, B, T, Hq, Hkv, D, s, window, divisor,
                             softcap);
  kc::cast(static_cast<const T16*>(a.dq), y, nq, s);
}

template <typename T16>
void attention16_backward(DeviceScratch& scratch, float* dq, float* dk, float* dv, const float* dy,
                          const float* lse, const float* q, const float* k, const float* v,
                          int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t D,
                          void* kernel_scratch, int64_t window, double divisor, double softcap,
                          cudaStream_t s) {
  const int64_t nq = B * T * Hq * D, nkv = B * T * Hkv * D;
  const Attention16Views<T16> a = attention16_views<T16>(scratch, nq, nkv);
  kc::cast(dy, a.dy, nq, s);
  kc::cast(q, a.q, nq, s);
  kc::cast(k, a.k, nkv, s);
  kc::cast(v, a.v, nkv, s);
  for (T16* g : {a.dq, a.dk, a.dv}) {
    const int64_t n = g == a.dq ? nq : nkv;
    CUDA_ABORT_IF_ERROR(cudaMemsetAsync(g, 0, static_cast<size_t>(n) * sizeof(T16), s));
  }
  // `out` is not read by the kernel (attention_cuda.h): no 16-bit copy of y is made for it.
  kc::attention_backward<T16>(a.dq, a.dk, a.dv, a.dy, nullptr, lse, a.q, a.k, a.v, B, T, Hq, Hkv, D,
                              kernel_scratch, s, window, divisor, softcap);
  kc::cast(static_cast<const T16*>(a.dq), dq, nq, s);
  kc::cast(static_cast<const T16*>(a.dk), dk, nkv, s);
  kc::cast(static_cast<const T16*>(a.dv), dv, nkv, s);
}

}  // namespace

void CudaTransformer::attention_forward(int layer, float* y, float* lse, const float* q,
                                        const float* k, const float* v, int64_t Hq, int64_t Hkv) {
  const ModelConfig& c = layout_.config();
  Buffers& bf = *buffers_;
  const int64_t D = c.head_dim(), window = c.attention_window(layer);
  const double divisor = c.attention_score_divisor(layer), cap = c.attn_logit_softcapping;
  switch (dtype_) {
    case DType::kF32:
      kc::attention_forward<float>(y, lse, q, k, v, B_, T_, Hq, Hkv, D, stream_, window, divisor,
                                   cap);
      return;
    case DType::kBF16:
      attention16_forward<__nv_bfloat16>(bf.attention16, y, lse, q, k, v, B_, T_, Hq, Hkv, D,
                                         window, divisor, cap, stream_);
      return;
    case DType::kF16:
      attention16_forward<__half>(bf.attention16, y, lse, q, k, v, B_, T_, Hq, Hkv, D, window,
                                  divisor, cap, stream_);
      return;
  }
}

void CudaTransformer::attention_backward(int layer, float* dq, float* dk, float* dv,
                                         const float* dy, const float* y, const float* lse,
                                         const float* q, const float* k, const float* v, int64_t Hq,
                                         int64_t Hkv) {
  const ModelConfig& c = layout_.config();
  Buffers& bf = *buffers_;
  const int64_t D = c.head_dim(), window = c.attention_window(layer);
  const double divisor = c.attention_score_divisor(layer), cap = c.attn_logit_softcapping;
  switch (dtype_) {
    case DType::kF32:
      kc::attention_backward<float>(dq, dk, dv, dy, y, lse, q, k, v, B_, T_, Hq, Hkv, D,
                                    bf.kernel_scratch, stream_, window, divisor, cap);
      return;
    case DType::kBF16:
      attention16_backward<__nv_bfloat16>(bf.attention16, dq, dk, dv, dy, lse, q, k, v, B_, T_, Hq,
                                          Hkv, D, bf.kernel_scratch, window, divisor, cap, stream_);
      return;
    case DType::kF16:
      attention16_backward<__half>(bf.attention16, dq, dk, dv, dy, lse, q, k, v, B_, T_, Hq, Hkv, D,
                                   bf.kernel_scratch, window, divisor, cap, stream_);
      return;
  }
}

// GPT-2: x2 = x + proj(attn(ln_1(x))); out = x2 + c_proj(gelu(c_fc(ln_2(x2)))).
void CudaTransformer::gpt2_block_forward(const CudaForwardContext& ctx, const DeviceUnit& w,
                                         const float* x, float* out, BlockActs& a,
                                         CudaBlockAttention& attention) {
  const ModelConfig& c = ctx.config;
  const int64_t N = ctx.B * ctx.T, C = c.hidden_size, F = c.intermediate_size;
  const float eps = static_cast<float>(c.norm_eps);
  cudaStream_t s = stream_;
  const UnitSpec& u = *w.spec;
  auto W = [&](ParamKind kind) { return w.f32(kind); };

  // inp16: the input's saved 16-bit copy (or the context's scratch); written by its producer
  // (copy16: the norms, GELU) or cast by the GEMM.
  const bool fused = fuse_16bit_copies(w);
  auto copy16 = [&](void* inp16, int64_t width) {
    return fused ? rounded16(w, inp16 != nullptr ? inp16 : ctx.x16, width) : kernels::Rounded16{};
  };
  auto dense = [&](float* out_, const float* inp, void* inp16, ParamKind weight, const float* bias,
                   int64_t C_, int64_t OC, bool ready) {
    dense_forward(out_, inp, w, weight, bias, N, C_, OC, inp16 != nullptr ? inp16 : ctx.x16, ready);
  };
  kc::layernorm_forward<float>(a.norm1, a.mean1, a.rstd1, x, W(ParamKind::kAttnNormWeight),
                               W(ParamKind::kAttnNormBias), N, C, eps, s, copy16(a.norm1_16, C));
  dense(a.qkv, a.norm1, a.norm1_16, ParamKind::kQkvWeight, W(ParamKind::kQkvBias), C, 3 * C, fused);
  // Split the fused projection: attention reads dense (N, C) q, k, v.
  cuda_glue::copy_columns(a.q, C, a.qkv, 3 * C, N, C, s);
  cuda_glue::copy_columns(a.k, C, a.qkv + C, 3 * C, N, C, s);
  cuda_glue::copy_columns(a.v, C, a.qkv + 2 * C, 3 * C, N, C, s);
  attention.forward(u.block_index, a.q, a.k, a.v, a.attn_y);
  dense(a.x2, a.attn_y, a.attn_y16, ParamKind::kAttnOutWeight, W(ParamKind::kAttnOutBias), C, C,
        false);
  kc::add<float>(a.x2, a.x2, x, N * C, s);
  kc::layernorm_forward<float>(a.norm2, a.mean2, a.rstd2, a.x2, W(ParamKind::kMlpNormWeight),
                               W(ParamKind::kMlpNormBias), N, C, eps, s, copy16(a.norm2_16, C));
  dense(a.up, a.norm2, a.norm2_16, ParamKind::kMlpUpWeight, W(ParamKind::kMlpUpBias), C, F, fused);
  kc::gelu_forward<float>(a.act, a.up, N * F, s, copy16(a.act16, F));
  dense(out, a.act, a.act16, ParamKind::kMlpDownWeight, W(ParamKind::kMlpDownBias), F, C, fused);
  kc::add<float>(out, out, a.x2, N * C, s);
}

void CudaTransformer::gpt2_block_backward(const DeviceUnit& w, float* dw, const float* x, float* dx,
                                          BlockActs& a) {
  const ModelConfig& c = layout_.config();
  const int64_t B = B_, T = T_, N = B * T, C = c.hidden_size, F = c.intermediate_size;
  const int64_t H = c.num_heads;
  Buffers& s = *buffers_;
  cudaStream_t st = stream_;
  const UnitSpec& u = *w.spec;
  auto W = [&](ParamKind kind) { return w.f32(kind); };
  auto dW = [&](ParamKind kind) { return dw + u.param(kind).offset; };

  // MLP: dx holds d(out); it is also d(x2) through the residual.
  dense_backward(s.dact, dW(ParamKind::kMlpDownWeight), dW(ParamKind::kMlpDownBias), dx, a.act, w,
                 ParamKind::kMlpDownWeight, N, F, C, a.act16, /*accumulate_dinp=*/false);
  zero_fill(s.dup, N * F, st);
  kc::gelu_backward<float>(s.dup, a.up, s.dact, N * F, st);
  dense_backward(s.dnorm, dW(ParamKind::kMlpUpWeight), dW(ParamKind::kMlpUpBias), s.dup, a.norm2, w,
                 ParamKind::kMlpUpWeight, N, C, F, a.norm2_16, /*accumulate_dinp=*/false);
  kc::layernorm_backward<float>(dx, dW(ParamKind::kMlpNormWeight), dW(ParamKind::kMlpNormBias),
                                s.dnorm, a.x2, W(ParamKind::kMlpNormWeight), a.mean2, a.rstd2, N, C,
                                s.kernel_scratch, s.kernel_scratch_bytes, st);
  // Attention: dx now holds d(x2), which is also d(x) through the residual.
  dense_backward(s.dattn_y, dW(ParamKind::kAttnOutWeight), dW(ParamKind::kAttnOutBias), dx,
                 a.attn_y, w, ParamKind::kAttnOutWeight, N, C, C, a.attn_y16,
                 /*accumulate_dinp=*/false);
  zero_fill(s.dq, N * C, st);
  zero_fill(s.dk, N * C, st);
  zero_fill(s.dv, N * C, st);
  attention_backward(u.block_index, s.dq, s.dk, s.dv, s.dattn_y, a.attn_y, a.lse, a.q, a.k, a.v, H,
                     H);
  // Merge into the fused projection's gradient.
  cuda_glue::copy_columns(s.dqkv, 3 * C, s.dq, C, N, C, st);
  cuda_glue::copy_columns(s.dqkv + C, 3 * C, s.dk, C, N, C, st);
  cuda_glue::copy_columns(s.dqkv + 2 * C, 3 * C, s.dv, C, N, C, st);
  dense_backward(s.dnorm, dW(ParamKind::kQkvWeight), dW(ParamKind::kQkvBias), s.dqkv, a.norm1, w,
                 ParamKind::kQkvWeight, N, C, 3 * C, a.norm1_16, /*accumulate_dinp=*/false);
  kc::layernorm_backward<float>(dx, dW(ParamKind::kAttnNormWeight), dW(ParamKind::kAttnNormBias),
                                s.dnorm, x, W(ParamKind::kAttnNormWeight), a.mean1, a.rstd1, N, C,
                                s.kernel_scratch, s.kernel_scratch_bytes, st);
}

// Llama: x2 = x + o_proj(attn(rope(q), rope(k), v)) over input_layernorm(x);
// out = x2 + down(silu(gate(h)) * up(h)), h = post_attention_layernorm(x2). Qwen3: q and k pass
// an RMSNorm over each head's D values (rows N*Hq, N*Hkv) before RoPE, rotated in place.
void CudaTransformer::llama_block_forward(const CudaForwardContext& ctx, const DeviceUnit& w,
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

  // inp16: the input's saved 16-bit copy (or the context's scratch); ready: already cast by the
  // GEMM before it on the same input (q/k/v, gate/up share one rounding).
  auto dense = [&](float* out_, const float* inp, void* inp16, bool ready, ParamKind weight,
                   const float* bias, int64_t C_, int64_t OC) {
    dense_forward(out_, inp, w, weight, bias, N, C_, OC, inp16 != nullptr ? inp16 : ctx.x16, ready);
  };

  // The norms and SwiGLU write the next GEMM's 16-bit input in the same pass (copy16).
  const bool fused = fuse_16bit_copies(w);
  auto copy16 = [&](void* inp16, int64_t width) {
    return fused ? rounded16(w, inp16 != nullptr ? inp16 : ctx.x16, width) : kernels::Rounded16{};
  };
  kc::rmsnorm_forward<float>(a.norm1, a.rstd1, x, W(ParamKind::kAttnNormWeight), N, C, eps, s,
                             copy16(a.norm1_16, C));
  dense(a.q, a.norm1, a.norm1_16, fused, ParamKind::kQWeight, Wopt(ParamKind::kQBias), C, Hq * D);
  dense(a.k, a.norm1, a.norm1_16, true, ParamKind::kKWeight, Wopt(ParamKind::kKBias), C, Hkv * D);
  dense(a.v, a.norm1, a.norm1_16, true, ParamKind::kVWeight, Wopt(ParamKind::kVBias), C, Hkv * D);
  const float* q = a.q;  // what RoPE rotates
  const float* k = a.k;
  if (c.qk_norm) {
    kc::rmsnorm_forward<float>(a.q_rot, a.q_rstd, a.q, W(ParamKind::kQNormWeight), N * Hq, D, eps,
                               s);
    kc::rmsnorm_forward<float>(a.k_rot, a.k_rstd, a.k, W(ParamKind::kKNormWeight), N * Hkv, D, eps,
                               s);
    q = a.q_rot;
    k = a.k_rot;
  }
  kc::rope_forward<float>(a.q_rot, q, ctx.rope_cos, ctx.rope_sin, B, T, Hq, D, s);
  kc::rope_forward<float>(a.k_rot, k, ctx.rope_cos, ctx.rope_sin, B, T, Hkv, D, s);
  attention.forward(u.block_index, a.q_rot, a.k_rot, a.v, a.attn_y);
  dense(a.x2, a.attn_y, a.attn_y16, false, ParamKind::kAttnOutWeight, Wopt(ParamKind::kAttnOutBias),
        Hq * D, C);
  kc::add<float>(a.x2, a.x2, x, N * C, s);
  kc::rmsnorm_forward<float>(a.norm2, a.rstd2, a.x2, W(ParamKind::kMlpNormWeight), N, C, eps, s,
                             copy16(a.norm2_16, C));
  dense(a.gate, a.norm2, a.norm2_16, fused, ParamKind::kMlpGateWeight,
        Wopt(ParamKind::kMlpGateBias), C, F);
  dense(a.up, a.norm2, a.norm2_16, true, ParamKind::kMlpUpWeight, Wopt(ParamKind::kMlpUpBias), C,
        F);
  kc::swiglu_forward<float>(a.act, a.gate, a.up, N * F, s, copy16(a.act16, F));
  dense(out, a.act, a.act16, fused, ParamKind::kMlpDownWeight, Wopt(ParamKind::kMlpDownBias), F, C);
  kc::add<float>(out, out, a.x2, N * C, s);
}

void CudaTransformer::llama_block_backward(const DeviceUnit& w, float* dw, const float* x,
                                           float* dx, BlockActs& a) {
  const ModelConfig& c = layout_.config();
  const int64_t B = B_, T = T_, N = B * T, C = c.hidden_size, F = c.intermediate_size;
  const int64_t Hq = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim();
  Buffers& s = *buffers_;
  cudaStream_t st = stream_;
  const UnitSpec& u = *w.spec;
  auto W = [&](ParamKind kind) { return w.f32(kind); };
  auto dW = [&](ParamKind kind) { return dw + u.param(kind).offset; };
  auto dWopt = [&](ParamKind kind) -> float* {
    const ParamSpec* p = u.find(kind);
    return p ? dw + p->offset : nullptr;
  };

  // MLP (dx holds d(out) = d(x2) through the residual).
  dense_backward(s.dact, dW(ParamKind::kMlpDownWeight), dWopt(ParamKind::kMlpDownBias), dx, a.act,
                 w, ParamKind::kMlpDownWeight, N, F, C, a.act16, /*accumulate_dinp=*/false);
  zero_fill(s.dgate, N * F, st);
  zero_fill(s.dup, N * F, st);
  kc::swiglu_backward<float>(s.dgate, s.dup, s.dact, a.gate, a.up, N * F, st);
  dense_backward(s.dnorm, dW(ParamKind::kMlpGateWeight), dWopt(ParamKind::kMlpGateBias), s.dgate,
                 a.norm2, w, ParamKind::kMlpGateWeight, N, C, F, a.norm2_16,
                 /*accumulate_dinp=*/false);
  dense_backward(s.dnorm, dW(ParamKind::kMlpUpWeight), dWopt(ParamKind::kMlpUpBias), s.dup, a.norm2,
                 w, ParamKind::kMlpUpWeight, N, C, F, a.norm2_16);
  kc::rmsnorm_backward<float>(dx, dW(ParamKind::kMlpNormWeight), s.dnorm, a.x2,
                              W(ParamKind::kMlpNormWeight), a.rstd2, N, C, s.kernel_scratch,
                              s.kernel_scratch_bytes, st);
  // Attention (dx holds d(x2) = d(x) through the residual).
  dense_backward(s.dattn_y, dW(ParamKind::kAttnOutWeight), dWopt(ParamKind::kAttnOutBias), dx,
                 a.attn_y, w, ParamKind::kAttnOutWeight, N, Hq * D, C, a.attn_y16,
                 /*accumulate_dinp=*/false);
  zero_fill(s.dq, N * Hq * D, st);
  zero_fill(s.dk, N * Hkv * D, st);
  zero_fill(s.dv, N * Hkv * D, st);
  attention_backward(u.block_index, s.dq, s.dk, s.dv, s.dattn_y, a.attn_y, a.lse, a.q_rot, a.k_rot,
                     a.v, Hq, Hkv);
  // Undo the rotation in place: the gradients become d(q), d(k) before RoPE.
  kc::rope_backward<float>(s.dq, s.dq, s.rope_cos, s.rope_sin, B, T, Hq, D, st);
  kc::rope_backward<float>(s.dk, s.dk, s.rope_cos, s.rope_sin, B, T, Hkv, D, st);
  const float* dq = s.dq;  // d(q), d(k) of the projections' outputs
  const float* dk = s.dk;
  if (c.qk_norm) {
    zero_fill(s.dq_proj, N * Hq * D, st);
    zero_fill(s.dk_proj, N * Hkv * D, st);
    kc::rmsnorm_backward<float>(s.dq_proj, dW(ParamKind::kQNormWeight), s.dq, a.q,
                                W(ParamKind::kQNormWeight), a.q_rstd, N * Hq, D, s.kernel_scratch,
                                s.kernel_scratch_bytes, st);
    kc::rmsnorm_backward<float>(s.dk_proj, dW(ParamKind::kKNormWeight), s.dk, a.k,
                                W(ParamKind::kKNormWeight), a.k_rstd, N * Hkv, D, s.kernel_scratch,
                                s.kernel_scratch_bytes, st);
    dq = s.dq_proj;
    dk = s.dk_proj;
  }
  dense_backward(s.dnorm, dW(ParamKind::kQWeight), dWopt(ParamKind::kQBias), dq, a.norm1, w,
                 ParamKind::kQWeight, N, C, Hq * D, a.norm1_16, /*accumulate_dinp=*/false);
  dense_backward(s.dnorm, dW(ParamKind::kKWeight), dWopt(ParamKind::kKBias), dk, a.norm1, w,
                 ParamKind::kKWeight, N, C, Hkv * D, a.norm1_16);
  dense_backward(s.dnorm, dW(ParamKind::kVWeight), dWopt(ParamKind::kVBias), s.dv, a.norm1, w,
                 ParamKind::kVWeight, N, C, Hkv * D, a.norm1_16);
  kc::rmsnorm_backward<float>(dx, dW(ParamKind::kAttnNormWeight), s.dnorm, x,
                              W(ParamKind::kAttnNormWeight), a.rstd1, N, C, s.kernel_scratch,
                              s.kernel_scratch_bytes, st);
}

bool CudaTransformer::fuse_16bit_copies(const DeviceUnit& w) const {
  return options_.fuse_16bit_copies && w.dtype != DType::kF32;
}

kernels::Rounded16 CudaTransformer::rounded16(const DeviceUnit& w, void* inp16, int64_t width) {
  return {.data = inp16, .bf16 = w.dtype == DType::kBF16, .ld = round_up_8(width), .width = width};
}

void CudaTransformer::dense_forward(float* out, const float* inp, const DeviceUnit& w,
                                    ParamKind weight, const float* bias, int64_t N, int64_t C,
                                    int64_t OC, void* inp16, bool inp16_ready) {
  kc::MatmulContext& mm = *buffers_->matmul;
  if (w.dtype == DType::kF32) {
    kc::matmul_forward<float>(mm, out, inp, w.f32(weight), bias, N, C, OC, stream_);
    return;
  }
  // inp16 (N, C) with rows padded to 16 bytes.
  const int64_t inp_ld = round_up_8(C);
  with_16bit(w.dtype, [&]<typename T16>() {
    T16* x16 = static_cast<T16*>(inp16 != nullptr ? inp16 : buffers_->x16);
    if (!inp16_ready) cuda_glue::cast_rows(x16, inp_ld, inp, C, N, C, stream_);
    kc::matmul_forward_16(mm, out, OC, x16, inp_ld, static_cast<const T16*>(w.stored(weight)), bias,
                          N, C, OC, stream_);
  });
}

void CudaTransformer::dense_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                     const float* inp, const DeviceUnit& w, ParamKind weight,
                                     int64_t N, int64_t C, int64_t OC, const void* inp16_saved,
                                     bool accumulate_dinp) {
  kc::MatmulContext& mm = *buffers_->matmul;
  if (w.dtype == DType::kF32) {
    kc::matmul_backward<float>(mm, dinp, dweight, dbias, dout, inp, w.f32(weight), N, C, OC,
                               stream_, accumulate_dinp);
    return;
  }
  // dout16 (N, OC) and, for dweight, inp16 (N, C), rows padded to 16 bytes: the forward's saved
  // copy, or the fp32 input rounded again (the same values).
  const int64_t inp_ld = round_up_8(C), dout_ld = round_up_8(OC);
  with_16bit(w.dtype, [&]<typename T16>() {
    const T16* inp16 = static_cast<const T16*>(inp16_saved);
    T16* dout16 = static_cast<T16*>(buffers_->dout16);
    cuda_glue::cast_rows(dout16, dout_ld, dout, OC, N, OC, stream_);
    if (dweight != nullptr && inp16 == nullptr) {
      T16* x16 = static_cast<T16*>(buffers_->x16);
      cuda_glue::cast_rows(x16, inp_ld, inp, C, N, C, stream_);
      inp16 = x16;
    }
    kc::matmul_backward_16(mm, dinp, dweight, dbias, dout, dout16, dout_ld, inp16, inp_ld,
                           static_cast<const T16*>(w.stored(weight)), N, C, OC, stream_,
                           accumulate_dinp);
  });
}

void CudaTransformer::embed_forward(float* x, const int32_t* tokens, const DeviceUnit& w, int64_t B,
                                    int64_t T, int64_t first_position, cudaStream_t s) const {
  const ModelConfig& c = layout_.config();
  const int64_t C = c.hidden_size, V = c.vocab_size;
  if (w.dtype == DType::kF32) {
    const float* wpe = w.f32_opt(ParamKind::kPositionEmbedding);
    kc::encoder_forward<float>(x, tokens, w.f32(ParamKind::kTokenEmbedding),
                               wpe != nullptr ? wpe + first_position * C : nullptr, B, T, C, V, s);
  } else {
    const auto* wpe = static_cast<const char*>(w.stored_opt(ParamKind::kPositionEmbedding));
    cuda_glue::embed_16(x, tokens, w.stored(ParamKind::kTokenEmbedding),
                        wpe != nullptr ? wpe + first_position * C * dtype_bytes(w.dtype) : nullptr,
                        w.dtype, B, T, C, V, s);
  }
  // Gemma: the rows times sqrt(hidden), as the CPU model (block_forward.cc).
  if (c.embedding_scale != 1.0f) kc::scale<float>(x, c.embedding_scale, B * T * C, s);
}

void CudaTransformer::final_norm_forward(float* norm, float* mean, float* rstd, const float* x,
                                         const DeviceUnit& fw, int64_t rows, cudaStream_t s) const {
  const ModelConfig& c = layout_.config();
  const float eps = static_cast<float>(c.norm_eps);
  if (c.arch == Arch::kGpt2) {
    kc::layernorm_forward<float>(norm, mean, rstd, x, fw.f32(ParamKind::kFinalNormWeight),
                                 fw.f32(ParamKind::kFinalNormBias), rows, c.hidden_size, eps, s);
  } else {
    kc::rmsnorm_forward<float>(norm, rstd, x,
                               norm_weight(fw.f32(ParamKind::kFinalNormWeight), c.hidden_size),
                               rows, c.hidden_size, eps, s);
  }
}

void CudaTransformer::head_forward(float* logits, int64_t logits_ld, const float* norm,
                                   const DeviceUnit& w, ParamKind weight, int64_t N, void* inp16) {
  const ModelConfig& c = layout_.config();
  const int64_t C = c.hidden_size, V = c.vocab_size;
  // Gemma 2: logits = cap * tanh(logits / cap), as the CPU model (head_backward's cross-entropy
  // gradient takes the cap's slope from these capped values).
  const auto soft_cap = [&] {
    if (c.final_logit_softcapping > 0) {
      kc::softcap_logits(logits, logits_ld, N, V, static_cast<float>(c.final_logit_softcapping),
                         stream_);
    }
  };
  if (w.dtype == DType::kF32) {
    ZERO_CHECK(logits_ld == V, "fp32 logits are dense: row stride ", logits_ld, " != V ", V);
    dense_forward(logits, norm, w, weight, nullptr, N, C, V);
    soft_cap();
    return;
  }
  kc::MatmulContext& mm = *buffers_->matmul;
  const int64_t inp_ld = round_up_8(C), V_main = head_vocab_main(V);
  with_16bit(w.dtype, [&]<typename T16>() {
    T16* x16 = static_cast<T16*>(inp16 != nullptr ? inp16 : buffers_->x16);
    const auto* weight16 = static_cast<const T16*>(w.stored(weight));
    cuda_glue::cast_rows(x16, inp_ld, norm, C, N, C, stream_);
    if (V_main > 0) {
      kc::matmul_forward_16(mm, logits, logits_ld, x16, inp_ld, weight16, nullptr, N, C, V_main,
                            stream_);
    }
    if (V > V_main) {
      kc::matmul_forward_16(mm, logits + V_main, logits_ld, x16, inp_ld, weight16 + V_main * C,
                            nullptr, N, C, V - V_main, stream_);
    }
  });
  soft_cap();
}

void CudaTransformer::head_backward(float* dnorm, float* dweight, const DeviceUnit& w,
                                    ParamKind weight) {
  Buffers& bf = *buffers_;
  const ModelConfig& c = layout_.config();
  const int64_t N = B_ * T_, C = c.hidden_size, V = c.vocab_size;
  // Gemma 2: the logits are capped (head_forward); the gradient is the uncapped ones'.
  const auto cap = static_cast<float>(c.final_logit_softcapping);
  if (w.dtype == DType::kF32) {
    kc::cross_entropy_backward<float>(bf.logits, bf.logits, bf.targets, bf.dloss, N, V, stream_,
                                      cap);
    dense_backward(dnorm, dweight, nullptr, bf.logits, bf.final_norm, w, weight, N, C, V,
                   /*inp16_saved=*/nullptr, /*accumulate_dinp=*/false);
    return;
  }
  // inp16 (N, C) whole; dout16 one chunk (rows, V), rows padded to 16 bytes. The chunks share
  // dout16: stream order puts each chunk's GEMMs before the next chunk's gradient overwrites it.
  // dweight accumulates chunk by chunk (fp32 sums of the same products in another order). The
  // vocabulary is split as in head_forward: the dnorm GEMM sums over V in two parts (main, then
  // the < 8 left), the dweight rows of each part are their own GEMM.
  const int64_t inp_ld = round_up_8(C), dout_ld = round_up_8(V), V_main = head_vocab_main(V);
  const int64_t logits_ld = bf.logits_ld;
  const int64_t chunk_rows = lm_head_rows(options_, N);
  kc::MatmulContext& mm = *bf.matmul;
  with_16bit(w.dtype, [&]<typename T16>() {
    T16* inp16 = static_cast<T16*>(bf.x16);
    T16* dout16 = static_cast<T16*>(bf.dout16);
    const auto* weight16 = static_cast<const T16*>(w.stored(weight));
    cuda_glue::cast_rows(inp16, inp_ld, bf.final_norm, C, N, C, stream_);
    for (int64_t row0 = 0; row0 < N; row0 += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, N - row0);
      kc::cross_entropy_backward_16<T16>(dout16, dout_ld, bf.logits + row0 * logits_ld, logits_ld,
                                         bf.targets + row0, bf.dloss + row0, rows, V, stream_, cap);
      // The chunk's dnorm rows: overwritten by the first GEMM, accumulated by the second.
      if (V_main > 0) {
        kc::matmul_backward_16(mm, dnorm + row0 * C, dweight, nullptr, nullptr, dout16, dout_ld,
                               inp16 + row0 * inp_ld, inp_ld, weight16, rows, C, V_main, stream_,
                               /*accumulate_dinp=*/false);
      }
      if (V > V_main) {
        kc::matmul_backward_16(mm, dnorm + row0 * C, dweight + V_main * C, nullptr, nullptr,
                               dout16 + V_main, dout_ld, inp16 + row0 * inp_ld, inp_ld,
                               weight16 + V_main * C, rows, C, V - V_main, stream_,
                               /*accumulate_dinp=*/V_main > 0);
      }
    }
  });
}

}  // namespace zero::model
