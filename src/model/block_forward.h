// The forward math of the decoder stack, written once: the embedding, each block (norms,
// projections, RoPE, MLP / SwiGLU, residuals) and the final norm + LM head. Training
// (Transformer) and KV-cached decoding (KvDecoder) both run it; the one piece that differs,
// attention, comes in through BlockAttention. A device model implements the same functions with
// its own kernels.
// Legend: N = B*T rows, C hidden, F intermediate, Hq/Hkv heads, D head dim, V vocab.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"
#include "model/param_layout.h"

namespace zero::kernels::cpu {
class Bf16Gemm;
}

namespace zero::model {

// What the units of one forward share: B sequences of T rows each, at positions
// [position, position + T) (training: 0; decoding: the cached length).
struct ForwardContext {
  const ModelConfig& config;
  int64_t B = 1, T = 1;
  int64_t position = 0;
  const float* rope_cos = nullptr;  // Llama: (positions, D/2) tables from position 0
  const float* rope_sin = nullptr;
  // Gemma 3: the sliding layers' own tables (ModelConfig::uses_local_rope); null otherwise.
  const float* rope_cos_local = nullptr;
  const float* rope_sin_local = nullptr;
  kernels::cpu::Bf16Gemm* bf16_gemm = nullptr;  // null: fp32 GEMMs
};

// The part of a block that differs between training and decoding: causal attention of the rows
// being run. Training attends within each sequence and keeps the probabilities for backward;
// decoding appends k and v to its cache and attends over every cached position.
class BlockAttention {
 public:
  // y (N, Hq*D) = attention of q (N, Hq*D) over the keys k and values v (N, Hkv*D) of these rows
  // and of any earlier positions the implementation holds. Llama's q and k are already rotated.
  virtual void forward(int layer, const float* q, const float* k, const float* v, float* y) = 0;

 protected:
  ~BlockAttention() = default;
};

// Where a block's forward writes its intermediates, N rows each; null where the architecture has
// no such tensor. Training keeps all of them for backward; decoding may alias norm2 with norm1
// (and their statistics): norm1 is dead once q, k, v are projected.
struct BlockBuffers {
  float* norm1;   // (N, C) ln_1 / input_layernorm output
  float* mean1;   // (N) GPT-2 (LayerNorm)
  float* rstd1;   // (N)
  float* qkv;     // GPT-2 (N, 3C) fused projection, split into q, k, v
  float* q;       // (N, Hq*D)
  float* k;       // (N, Hkv*D)
  float* v;       // (N, Hkv*D)
  float* q_rot;   // Llama (N, Hq*D) q after RoPE (Qwen3: after q_norm, then RoPE)
  float* k_rot;   // Llama (N, Hkv*D) k after RoPE (Qwen3: after k_norm, then RoPE)
  float* q_rstd;  // Qwen3 (N*Hq) q_norm statistics, one per row and head
  float* k_rstd;  // Qwen3 (N*Hkv) k_norm statistics
  float* attn_y;  // (N, Hq*D) attention output before the output projection
  float* x2;      // (N, C) residual after attention
  float* norm2;   // (N, C) ln_2 / post_attention_layernorm output
  float* mean2;   // (N) GPT-2
  float* rstd2;   // (N)
  float* gate;    // Llama (N, F) gate projection
  float* up;      // (N, F) GPT-2 c_fc output / Llama up projection
  float* act;     // (N, F) GPT-2 gelu(up) / Llama silu(gate) * up / Gemma gelu(gate) * up
  // Gemma 3 (post_norms): the attention and MLP outputs before their post-norms, those norms'
  // statistics, and gelu(gate).
  float* attn_out;        // (N, C) o_proj output
  float* rstd_post_attn;  // (N)
  float* mlp_out;         // (N, C) down_proj output
  float* rstd_post_mlp;   // (N)
  float* gate_act;        // (N, F) gelu(gate)
};

// Where the final unit writes its norm.
struct FinalBuffers {
  float* norm;  // (N, C) ln_f / model.norm output
  float* mean;  // (N) GPT-2
  float* rstd;  // (N)
};

// x (N, C) = token embedding of tokens (B, T), plus GPT-2's learned position embedding.
void embedding_forward(const ForwardContext& ctx, const UnitSpec& u, const float* w,
                       const int32_t* tokens, float* x);

// out (N, C) = block u (weights w, laid out as u) over its input x (N, C). out may alias x (x is
// last read before the MLP's down projection writes out).
void block_forward(const ForwardContext& ctx, const UnitSpec& u, const float* w, const float* x,
                   float* out, const BlockBuffers& b, BlockAttention& attention);

// logits (N, V) = final_norm(x (N, C)) · head^T for N rows (not necessarily ctx's: decoding
// needs only the last). head (V, C) is the final unit's lm_head or, tied, the token embedding.
void final_forward(const ForwardContext& ctx, const UnitSpec& u, const float* w, const float* head,
                   const float* x, int64_t N, const FinalBuffers& b, float* logits);

// The architectures' block bodies (gpt2_block.cc, llama_block.cc, beside their backward);
// block_forward picks one.
void gpt2_block_forward(const ForwardContext& ctx, const UnitSpec& u, const float* w,
                        const float* x, float* out, const BlockBuffers& b,
                        BlockAttention& attention);
void llama_block_forward(const ForwardContext& ctx, const UnitSpec& u, const float* w,
                         const float* x, float* out, const BlockBuffers& b,
                         BlockAttention& attention);
void gemma_block_forward(const ForwardContext& ctx, const UnitSpec& u, const float* w,
                         const float* x, float* out, const BlockBuffers& b,
                         BlockAttention& attention);

// The weights an RMSNorm multiplies by: w itself, or Gemma's (1 + w) (norm_weight_offset), n of
// them.
std::vector<float> applied_norm_weight(const ModelConfig& c, const float* w, int64_t n);

}  // namespace zero::model
