// Per-block saved activations (forward) and the shared gradient scratch (backward).
// Legend: N = B*T rows, C hidden, F mlp hidden, Hq/Hkv heads, D head dim, T time.
#pragma once

#include "core/tensor.h"
#include "model/block_forward.h"
#include "model/model_config.h"
#include "model/transformer.h"

namespace zero::model {

// Saved forward activations of one block. GPT-2 packs q/k/v into one projection (qkv); Llama has
// separate projections and rotates q, k (q_rot, k_rot).
struct Transformer::BlockActs {
  BlockActs(const ModelConfig& c, int64_t B, int64_t T) {
    const int64_t N = B * T, C = c.hidden_size, F = c.intermediate_size;
    const int64_t D = c.head_dim(), Hq = c.num_heads, Hkv = c.num_kv_heads;
    norm1 = Tensor(Shape{N, C});
    mean1 = Tensor(Shape{N});
    rstd1 = Tensor(Shape{N});
    q = Tensor(Shape{N, Hq * D});
    k = Tensor(Shape{N, Hkv * D});
    v = Tensor(Shape{N, Hkv * D});
    att = Tensor(Shape{B, Hq, T, T});
    attn_y = Tensor(Shape{N, Hq * D});
    x2 = Tensor(Shape{N, C});
    norm2 = Tensor(Shape{N, C});
    mean2 = Tensor(Shape{N});
    rstd2 = Tensor(Shape{N});
    up = Tensor(Shape{N, F});
    act = Tensor(Shape{N, F});
    if (c.arch == Arch::kGpt2) {
      qkv = Tensor(Shape{N, 3 * C});
    } else {
      q_rot = Tensor(Shape{N, Hq * D});
      k_rot = Tensor(Shape{N, Hkv * D});
      gate = Tensor(Shape{N, F});
    }
    if (c.qk_norm) {
      q_rstd = Tensor(Shape{N * Hq});
      k_rstd = Tensor(Shape{N * Hkv});
    }
    if (c.post_norms) {
      attn_out = Tensor(Shape{N, C});
      rstd_post_attn = Tensor(Shape{N});
      mlp_out = Tensor(Shape{N, C});
      rstd_post_mlp = Tensor(Shape{N});
      gate_act = Tensor(Shape{N, F});
    }
  }
  // Where block_forward writes (null for the tensors this architecture does not allocate).
  BlockBuffers buffers() const {
    return {.norm1 = norm1.f32(),
            .mean1 = mean1.f32(),
            .rstd1 = rstd1.f32(),
            .qkv = qkv.f32(),
            .q = q.f32(),
            .k = k.f32(),
            .v = v.f32(),
            .q_rot = q_rot.f32(),
            .k_rot = k_rot.f32(),
            .q_rstd = q_rstd.f32(),
            .k_rstd = k_rstd.f32(),
            .attn_y = attn_y.f32(),
            .x2 = x2.f32(),
            .norm2 = norm2.f32(),
            .mean2 = mean2.f32(),
            .rstd2 = rstd2.f32(),
            .gate = gate.f32(),
            .up = up.f32(),
            .act = act.f32(),
            .attn_out = attn_out.f32(),
            .rstd_post_attn = rstd_post_attn.f32(),
            .mlp_out = mlp_out.f32(),
            .rstd_post_mlp = rstd_post_mlp.f32(),
            .gate_act = gate_act.f32()};
  }

  Tensor norm1, mean1, rstd1;  // (N, C), (N), (N): ln_1 / input_layernorm
  Tensor qkv;                  // GPT-2 (N, 3C)
  Tensor q, k, v;              // (N, Hq*D), (N, Hkv*D), (N, Hkv*D)
  Tensor q_rot, k_rot;         // Llama: after RoPE
  Tensor q_rstd, k_rstd;       // Qwen3 / Gemma 3 (N*Hq), (N*Hkv): q_norm / k_norm statistics
  Tensor attn_out, rstd_post_attn, mlp_out, rstd_post_mlp, gate_act;  // Gemma 3 (BlockBuffers)
  Tensor att;                  // (B, Hq, T, T) softmax probabilities
  Tensor attn_y;               // (N, Hq*D) attention output before the output projection
  Tensor x2;                   // (N, C) residual after attention
  Tensor norm2, mean2, rstd2;  // ln_2 / post_attention_layernorm
  Tensor gate;                 // Llama (N, F) gate projection
  Tensor up;                   // (N, F) GPT-2 c_fc output / Llama up projection
  Tensor act;                  // (N, F) GPT-2 gelu(up) / Llama silu(gate) * up
};

// Gradient scratch shared by all blocks (only one block is in backward at a time).
struct Transformer::BlockScratch {
  BlockScratch(const ModelConfig& c, int64_t B, int64_t T) {
    const int64_t N = B * T, C = c.hidden_size, F = c.intermediate_size;
    const int64_t D = c.head_dim(), Hq = c.num_heads, Hkv = c.num_kv_heads;
    dnorm = Tensor(Shape{N, C});
    dq = Tensor(Shape{N, Hq * D});
    dk = Tensor(Shape{N, Hkv * D});
    dv = Tensor(Shape{N, Hkv * D});
    dattn_y = Tensor(Shape{N, Hq * D});
    dact = Tensor(Shape{N, F});
    dup = Tensor(Shape{N, F});
    dgate = Tensor(Shape{N, F});
    if (c.arch == Arch::kGpt2) dqkv = Tensor(Shape{N, 3 * C});
    if (c.qk_norm) {
      dq_proj = Tensor(Shape{N, Hq * D});
      dk_proj = Tensor(Shape{N, Hkv * D});
    }
    if (c.post_norms) {
      dpost = Tensor(Shape{N, C});
      dgelu = Tensor(Shape{N, F});
    }
  }
  Tensor dnorm, dq, dk, dv, dqkv, dattn_y, dact, dup, dgate;
  Tensor dq_proj, dk_proj;  // Qwen3: d(q), d(k) before q_norm / k_norm (N, Hq*D), (N, Hkv*D)
  Tensor dpost, dgelu;      // Gemma 3: d(attention or MLP output) (N, C), d(gelu(gate)) (N, F)
};

}  // namespace zero::model
