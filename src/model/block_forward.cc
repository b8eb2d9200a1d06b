// The embedding and final units' forward, and the per-architecture dispatch of a block's (see
// block_forward.h). Legend: N = B*T rows, C hidden, V vocab.
#include "model/block_forward.h"

#include "kernels/elementwise/elementwise.h"
#include "kernels/encoder/encoder.h"
#include "kernels/layernorm/layernorm.h"
#include "kernels/matmul/matmul.h"
#include "kernels/rmsnorm/rmsnorm.h"

namespace zero::model {

namespace k = kernels::cpu;

void embedding_forward(const ForwardContext& ctx, const UnitSpec& u, const float* w,
                       const int32_t* tokens, float* x) {
  const int64_t C = ctx.config.hidden_size, V = ctx.config.vocab_size;
  const ParamSpec* wpe = u.find(ParamKind::kPositionEmbedding);
  // Each sequence's position rows start at ctx.position.
  k::encoder_forward(x, tokens, w + u.param(ParamKind::kTokenEmbedding).offset,
                     wpe ? w + wpe->offset + ctx.position * C : nullptr, ctx.B, ctx.T, C, V);
  // Gemma: the rows times sqrt(hidden) (transformers' fp32 embed_scale).
  if (ctx.config.embedding_scale != 1.0f) {
    k::scale(x, ctx.config.embedding_scale, ctx.B * ctx.T * C);
  }
}

std::vector<float> applied_norm_weight(const ModelConfig& c, const float* w, int64_t n) {
  std::vector<float> out(w, w + n);
  if (c.norm_weight_offset != 0) {
    // HF Gemma: output * (1.0 + weight.float()), in fp32.
    for (float& v : out) v = static_cast<float>(c.norm_weight_offset) + v;
  }
  return out;
}

void block_forward(const ForwardContext& ctx, const UnitSpec& u, const float* w, const float* x,
                   float* out, const BlockBuffers& b, BlockAttention& attention) {
  if (ctx.config.arch == Arch::kGpt2) {
    gpt2_block_forward(ctx, u, w, x, out, b, attention);
  } else if (ctx.config.post_norms) {
    gemma_block_forward(ctx, u, w, x, out, b, attention);
  } else {
    llama_block_forward(ctx, u, w, x, out, b, attention);
  }
}

void final_forward(const ForwardContext& ctx, const UnitSpec& u, const float* w, const float* head,
                   const float* x, int64_t N, const FinalBuffers& b, float* logits) {
  const ModelConfig& c = ctx.config;
  const int64_t C = c.hidden_size, V = c.vocab_size;
  const float eps = static_cast<float>(c.norm_eps);
  if (c.arch == Arch::kGpt2) {
    k::layernorm_forward(b.norm, b.mean, b.rstd, x, w + u.param(ParamKind::kFinalNormWeight).offset,
                         w + u.param(ParamKind::kFinalNormBias).offset, N, C, eps);
  } else {
    const std::vector<float> norm_w =
        applied_norm_weight(c, w + u.param(ParamKind::kFinalNormWeight).offset, C);
    k::rmsnorm_forward(b.norm, b.rstd, x, norm_w.data(), N, C, eps);
  }
  k::matmul_forward(logits, b.norm, head, static_cast<const float*>(nullptr), N, C, V,
                    ctx.bf16_gemm);
}

}  // namespace zero::model
