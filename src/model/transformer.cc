// Transformer forward/backward: the orchestration over units. The forward math is shared with
// decoding (block_forward.h); the backward math lives in gpt2_block.cc and llama_block.cc. Legend:
// N = B*T rows, C hidden, V vocab.
#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention/attention.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/encoder/encoder.h"
#include "kernels/layernorm/layernorm.h"
#include "kernels/matmul/bf16_gemm.h"
#include "kernels/matmul/matmul.h"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/rope/rope.h"
#include "model/block_acts.h"
#include "model/block_forward.h"

namespace zero::model {

namespace k = kernels::cpu;

Transformer::Transformer(const ModelConfig& config, TransformerOptions options)
    : layout_(config), options_(options) {
  if (options_.bf16_gemm) bf16_gemm_ = std::make_unique<kernels::cpu::Bf16Gemm>();
  lend_widened_units();
}

void Transformer::lend_widened_units() {
  widened_unit_.lend_to(bf16_gemm_.get(), 0);
  widened_embedding_.lend_to(bf16_gemm_.get(), 1);
}

Transformer::~Transformer() = default;

void Transformer::logits_at(int64_t b, int64_t t, float* out) const {
  const int64_t V = layout_.config().vocab_size;
  std::memcpy(out, logits_.f32() + (b * T_ + t) * V, static_cast<size_t>(V) * sizeof(float));
}

namespace {

// The largest operands of the dense-layer and LM-head GEMMs over N rows, in elements: a is the
// input or dout (N, widest); b is a weight (out, in) or, for dweight, the input (N, in).
struct GemmOperandNumel {
  int64_t a, b;
};
GemmOperandNumel bf16_gemm_operand_numel(const ModelConfig& c, int64_t N) {
  const int64_t C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t HqD = c.num_heads * c.head_dim();
  const int64_t widest = std::max({V, F, 3 * C, HqD});
  const int64_t widest_in = std::max({C, F, HqD});
  const int64_t largest_weight = std::max({V * C, F * C, 3 * C * C, HqD * C});
  return {N * widest, std::max(largest_weight, N * widest_in)};
}

}  // namespace

int64_t Transformer::activation_bytes(const ModelConfig& c, const TransformerOptions& options,
                                      int64_t B, int64_t T) {
  // Mirrors ensure_buffers, BlockActs and BlockScratch (block_acts.h), in floats.
  const int64_t N = B * T, C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t D = c.head_dim(), Hq = c.num_heads, Hkv = c.num_kv_heads;
  const bool gpt2 = c.arch == Arch::kGpt2;
  int64_t acts = 3 * N * C + 2 * N * 2 + N * Hq * D + 2 * N * Hkv * D + B * Hq * T * T +
                 N * Hq * D + 2 * N * F;
  acts += gpt2 ? N * 3 * C : N * Hq * D + N * Hkv * D + N * F;
  int64_t scratch = N * C + 2 * N * Hq * D + 2 * N * Hkv * D + 3 * N * F + (gpt2 ? N * 3 * C : 0);
  if (c.qk_norm) {
    acts += N * Hq + N * Hkv;             // q_rstd, k_rstd
    scratch += N * Hq * D + N * Hkv * D;  // dq_proj, dk_proj
  }
  if (c.post_norms) {
    acts += 2 * N * C + 2 * N + N * F;  // attn_out, mlp_out, their rstd, gate_act
    scratch += N * C + N * F;           // dpost, dgelu
  }
  const int64_t blocks = options.activation_checkpointing ? 1 : c.num_layers;
  int64_t floats =
      (c.num_layers + 1) * N * C + blocks * acts + scratch + N * C + 2 * N + N * V + N + 2 * N * C;
  if (!gpt2) floats += 2 * T * (D / 2);
  if (c.local_rope_theta > 0) floats += 2 * T * (D / 2);
  int64_t bf16_scratch_bytes = 0;
  if (options.bf16_gemm) {
    const GemmOperandNumel g = bf16_gemm_operand_numel(c, N);
    bf16_scratch_bytes = (g.a + g.b) * static_cast<int64_t>(sizeof(uint16_t));
  }
  return floats * static_cast<int64_t>(sizeof(float)) + bf16_scratch_bytes;
}

void Transformer::ensure_buffers(int64_t B, int64_t T) {
  if (B == B_ && T == T_) return;
  const ModelConfig& c = layout_.config();
  B_ = B;
  T_ = T;
  const int64_t N = B * T, C = c.hidden_size;
  residual_.clear();
  for (int l = 0; l <= c.num_layers; ++l) residual_.emplace_back(Shape{N, C});
  acts_.clear();
  int n_acts = options_.activation_checkpointing ? 1 : static_cast<int>(c.num_layers);
  for (int l = 0; l < n_acts; ++l) acts_.push_back(std::make_unique<BlockActs>(c, B, T));
  scratch_ = std::make_unique<BlockScratch>(c, B, T);
  final_norm_ = Tensor(Shape{N, C});
  final_mean_ = Tensor(Shape{N});
  final_rstd_ = Tensor(Shape{N});
  logits_ = Tensor(Shape{N, c.vocab_size});
  losses_ = Tensor(Shape{N});
  dresidual_a_ = Tensor(Shape{N, C});
  dresidual_b_ = Tensor(Shape{N, C});
  if (c.arch == Arch::kLlama) {
    const int64_t D = c.head_dim();
    rope_cos_ = Tensor(Shape{T, D / 2});
    rope_sin_ = Tensor(Shape{T, D / 2});
    k::rope_tables(rope_cos_.f32(), rope_sin_.f32(),
                   k::rope_inv_freq(D, c.rope_theta, c.rope_scaling, T), T,
                   c.rope_scaling.attention_factor);
    if (c.local_rope_theta > 0) {
      rope_cos_local_ = Tensor(Shape{T, D / 2});
      rope_sin_local_ = Tensor(Shape{T, D / 2});
      k::rope_tables(rope_cos_local_.f32(), rope_sin_local_.f32(),
                     k::rope_inv_freq(D, c.local_rope_theta, c.local_rope_scaling, T), T,
                     c.local_rope_scaling.attention_factor);
    }
  }
  int64_t bytes = 0;
  auto add = [&](const Tensor& t) { bytes += static_cast<int64_t>(t.nbytes()); };
  for (const Tensor& t : residual_) add(t);
  for (const auto& a : acts_) {
    for (const Tensor* t : {&a->norm1,    &a->mean1,
                            &a->rstd1,    &a->qkv,
                            &a->q,        &a->k,
                            &a->v,        &a->q_rot,
                            &a->k_rot,    &a->q_rstd,
                            &a->k_rstd,   &a->att,
                            &a->attn_y,   &a->x2,
                            &a->norm2,    &a->mean2,
                            &a->rstd2,    &a->gate,
                            &a->up,       &a->act,
                            &a->attn_out, &a->rstd_post_attn,
                            &a->mlp_out,  &a->rstd_post_mlp,
                            &a->gate_act}) {
      add(*t);
    }
  }
  const BlockScratch& sc = *scratch_;
  for (const Tensor* t : {&sc.dnorm, &sc.dq, &sc.dk, &sc.dv, &sc.dqkv, &sc.dattn_y, &sc.dact,
                          &sc.dup, &sc.dgate, &sc.dq_proj, &sc.dk_proj, &sc.dpost, &sc.dgelu}) {
    add(*t);
  }
  for (const Tensor* t :
       {&final_norm_, &final_mean_, &final_rstd_, &logits_, &losses_, &dresidual_a_, &dresidual_b_,
        &rope_cos_, &rope_sin_, &rope_cos_local_, &rope_sin_local_}) {
    add(*t);
  }
  if (bf16_gemm_) {
    // A fresh instance, so that the scratch is exactly this shape's bound (never a larger one's).
    const GemmOperandNumel g = bf16_gemm_operand_numel(c, N);
    bf16_gemm_ = std::make_unique<kernels::cpu::Bf16Gemm>();
    bf16_gemm_->reserve(g.a, g.b);
    bytes += bf16_gemm_->scratch_bytes();
    lend_widened_units();
  }
  buffer_bytes_ = bytes;
}

float Transformer::forward(ParamAccess& params, const int32_t* tokens, const int32_t* targets,
                           int64_t B, int64_t T) {
  const ModelConfig& c = layout_.config();
  ZERO_CHECK(T >= 1 && (c.arch != Arch::kGpt2 || T <= c.max_position_embeddings),
             "sequence length ", T, " exceeds max_position_embeddings ", c.max_position_embeddings);
  ensure_buffers(B, T);
  const int64_t N = B * T, V = c.vocab_size;
  tokens_.assign(tokens, tokens + N);
  if (targets) {
    targets_.assign(targets, targets + N);
  } else {
    targets_.assign(static_cast<size_t>(N), k::kIgnoreIndex);
  }

  const ForwardContext ctx = forward_context();

  // Embedding unit.
  const int emb = layout_.embedding_unit();
  {
    AcquiredUnit w(params, emb, widened_embedding_);
    embedding_forward(ctx, layout_.unit(emb), w, tokens_.data(), residual_[0].f32());
  }

  // Blocks.
  for (int l = 0; l < c.num_layers; ++l) {
    const int unit = layout_.block_unit(l);
    AcquiredUnit w(params, unit, widened_unit_);
    BlockActs& a = *acts_[options_.activation_checkpointing ? 0 : static_cast<size_t>(l)];
    block_forward(l, w, residual_[static_cast<size_t>(l)].f32(),
                  residual_[static_cast<size_t>(l) + 1].f32(), a);
  }

  // Final norm + head (the tied head reads the embedding unit).
  const int fin = layout_.final_unit();
  const UnitSpec& fu = layout_.unit(fin);
  AcquiredUnit fw(params, fin, widened_unit_);
  const FinalBuffers fb{final_norm_.f32(), final_mean_.f32(), final_rstd_.f32()};
  if (const ParamSpec* lm = fu.find(ParamKind::kLmHead)) {
    final_forward(ctx, fu, fw, fw + lm->offset, residual_.back().f32(), N, fb, logits_.f32());
  } else {
    AcquiredUnit ew(params, emb, widened_embedding_);
    const float* head = ew + layout_.unit(emb).param(ParamKind::kTokenEmbedding).offset;
    final_forward(ctx, fu, fw, head, residual_.back().f32(), N, fb, logits_.f32());
  }
  fw.release();
  if (c.final_logit_softcapping > 0) {  // Gemma 2: logits = cap * tanh(logits / cap)
    const float cap = static_cast<float>(c.final_logit_softcapping);
    float* logits = logits_.f32();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N * V; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
  }

  counted_targets_ = 0;
  for (int32_t t : targets_) counted_targets_ += (t != k::kIgnoreIndex);
  if (!targets) return 0.0f;
  k::cross_entropy_forward(losses_.f32(), logits_.f32(), targets_.data(), N, V);
  double sum = 0.0;
  for (int64_t n = 0; n < N; ++n) sum += losses_.f32()[n];
  return counted_targets_ > 0 ? static_cast<float>(sum / static_cast<double>(counted_targets_))
                              : 0.0f;
}

void Transformer::backward(ParamAccess& params, GradSink& grads, float dloss_per_token) {
  const ModelConfig& c = layout_.config();
  const int64_t B = B_, T = T_, N = B * T, C = c.hidden_size, V = c.vocab_size;
  ZERO_CHECK(N > 0, "backward called before forward");

  // Loss -> logits, in place (the logits buffer becomes dlogits).
  std::vector<float> dloss(static_cast<size_t>(N), dloss_per_token);
  // Gemma 2's capped logits L = cap tanh(x / cap): dx = dL (1 - (L / cap)^2), L read before the
  // buffer becomes dL.
  std::vector<float> cap_slope;
  if (c.final_logit_softcapping > 0) {
    const float cap = static_cast<float>(c.final_logit_softcapping);
    cap_slope.resize(static_cast<size_t>(N * V));
    const float* L = logits_.f32();
    for (int64_t i = 0; i < N * V; ++i)
      cap_slope[static_cast<size_t>(i)] = 1.0f - (L[i] / cap) * (L[i] / cap);
  }
  k::cross_entropy_backward(logits_.f32(), logits_.f32(), targets_.data(), dloss.data(), N, V);
  for (size_t i = 0; i < cap_slope.size(); ++i) logits_.f32()[i] *= cap_slope[i];

  // Final unit: head then norm.
  const int emb = layout_.embedding_unit();
  const int fin = layout_.final_unit();
  const UnitSpec& fu = layout_.unit(fin);
  AcquiredUnit fw(params, fin, widened_unit_);
  float* fdw = grads.grad_buffer(fin);
  float* dnorm = dresidual_b_.f32();
  std::memset(dnorm, 0, static_cast<size_t>(N * C) * sizeof(float));
  if (const ParamSpec* lm = fu.find(ParamKind::kLmHead)) {
    k::matmul_backward(dnorm, fdw + lm->offset, static_cast<float*>(nullptr), logits_.f32(),
                       final_norm_.f32(), fw + lm->offset, N, C, V, bf16_gemm_.get());
  } else {
    AcquiredUnit ew(params, emb, widened_embedding_);
    const int64_t off = layout_.unit(emb).param(ParamKind::kTokenEmbedding).offset;
    k::matmul_backward(dnorm, grads.grad_buffer(emb) + off, static_cast<float*>(nullptr),
                       logits_.f32(), final_norm_.f32(), ew + off, N, C, V, bf16_gemm_.get());
  }
  float* dx = dresidual_a_.f32();
  std::memset(dx, 0, static_cast<size_t>(N * C) * sizeof(float));
  const float* xL = residual_.back().f32();
  const int64_t wn = fu.param(ParamKind::kFinalNormWeight).offset;
  if (c.arch == Arch::kGpt2) {
    const int64_t bn = fu.param(ParamKind::kFinalNormBias).offset;
    k::layernorm_backward(dx, fdw + wn, fdw + bn, dnorm, xL, fw + wn, final_mean_.f32(),
                          final_rstd_.f32(), N, C);
  } else {
    const std::vector<float> norm_w = applied_norm_weight(c, fw + wn, C);
    k::rmsnorm_backward(dx, fdw + wn, dnorm, xL, norm_w.data(), final_rstd_.f32(), N, C);
  }
  fw.release();
  grads.grad_ready(fin);

  // Blocks in reverse; dout lives in `dx`, the block writes its input gradient into `dnext`.
  float* dnext = dresidual_b_.f32();
  for (int l = static_cast<int>(c.num_layers) - 1; l >= 0; --l) {
    const int unit = layout_.block_unit(l);
    AcquiredUnit w(params, unit, widened_unit_);
    float* dw = grads.grad_buffer(unit);
    BlockActs& a = *acts_[options_.activation_checkpointing ? 0 : static_cast<size_t>(l)];
    const float* x = residual_[static_cast<size_t>(l)].f32();
    if (options_.activation_checkpointing) {
      // Recompute this block's activations from its saved input; the output goes to scratch (dnext
      // is overwritten by the backward below anyway).
      block_forward(l, w, x, dnext, a);
    }
    block_backward(l, w, dw, x, dx, a);  // dx: in = d(output), out = d(input)
    w.release();
    grads.grad_ready(unit);
  }

  // Embedding unit.
  {
    const UnitSpec& u = layout_.unit(emb);
    float* dw = grads.grad_buffer(emb);
    const ParamSpec* wpe = u.find(ParamKind::kPositionEmbedding);
    // Gemma: x = wte[token] * embedding_scale, so d(wte) gets the scaled gradient (dx is dead).
    if (c.embedding_scale != 1.0f) k::scale(dx, c.embedding_scale, N * C);
    k::encoder_backward(dw + u.param(ParamKind::kTokenEmbedding).offset,
                        wpe ? dw + wpe->offset : nullptr, dx, tokens_.data(), B, T, C, V);
    grads.grad_ready(emb);
  }
}

ForwardContext Transformer::forward_context() const {
  return {.config = layout_.config(),
          .B = B_,
          .T = T_,
          .position = 0,
          .rope_cos = rope_cos_.f32(),
          .rope_sin = rope_sin_.f32(),
          .rope_cos_local = rope_cos_local_.empty() ? nullptr : rope_cos_local_.f32(),
          .rope_sin_local = rope_sin_local_.empty() ? nullptr : rope_sin_local_.f32(),
          .bf16_gemm = bf16_gemm_.get()};
}

namespace {

// Training's attention: causal within each of the B sequences of T rows, keeping the
// probabilities att (B, Hq, T, T) for backward.
class SequenceAttention final : public BlockAttention {
 public:
  SequenceAttention(const ModelConfig& config, int64_t B, int64_t T, float* att)
      : config_(config), B_(B), T_(T), att_(att) {}
  void forward(int layer, const float* q, const float* k, const float* v, float* y) override {
    const ModelConfig& c = config_;
    k::attention_forward(y, att_, q, k, v, B_, T_, c.num_heads, c.num_kv_heads, c.head_dim(),
                         c.attention_window(layer), c.attention_score_divisor(layer),
                         c.attn_logit_softcapping);
  }

 private:
  const ModelConfig& config_;
  int64_t B_, T_;
  float* att_;
};

}  // namespace

void Transformer::block_forward(int layer, const float* w, const float* x, float* out,
                                BlockActs& a) {
  SequenceAttention attention(layout_.config(), B_, T_, a.att.f32());
  model::block_forward(forward_context(), layout_.unit(layout_.block_unit(layer)), w, x, out,
                       a.buffers(), attention);
}

void Transformer::block_backward(int layer, const float* w, float* dw, const float* x, float* dx,
                                 BlockActs& a) {
  const UnitSpec& u = layout_.unit(layout_.block_unit(layer));
  if (layout_.config().arch == Arch::kGpt2) {
    gpt2_block_backward(u, w, dw, x, dx, a);
  } else if (layout_.config().post_norms) {
    gemma_block_backward(u, w, dw, x, dx, a);
  } else {
    llama_block_backward(u, w, dw, x, dx, a);
  }
}

}  // namespace zero::model
