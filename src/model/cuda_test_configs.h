// Test support (header only, for the CUDA model's *_test.cc: cuda_transformer_test.cc,
// cuda_kv_decoder_test.cc): the tiny GPT-2 and Llama configs both run on a GPU and on the CPU
// emulator. C = 32, 2 layers, an odd vocabulary; 4 query heads over 2 kv heads. The emulator runs
// every CUDA thread as a host thread and attention is nearly all of its time (one block of 256
// threads per (batch, head)): 2 query heads over 1 kv head there, still grouped.
#pragma once

#include <cmath>
#include <cstdint>

#include "model/model_config.h"

namespace zero::model::testing {

constexpr int64_t kVocab = 97;
#if defined(ZERO_CUDA_EMU)
constexpr int64_t kQueryHeads = 2, kKvHeads = 1;
#else
constexpr int64_t kQueryHeads = 4, kKvHeads = 2;
#endif

// GPT-2 with the per-layer score divisor, `positions` positions.
inline ModelConfig tiny_gpt2_config(int64_t positions) {
  ModelConfig c;
  c.arch = Arch::kGpt2;
  c.model_type = "gpt2";
  c.vocab_size = kVocab;
  c.max_position_embeddings = positions;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = kQueryHeads;
  c.num_kv_heads = kQueryHeads;
  c.intermediate_size = 128;
  c.hidden_act = "gelu_new";
  c.scale_attn_by_inverse_layer_idx = true;  // the score divisor of layer 1
  return c;
}

// Llama: GQA, llama3 RoPE scaling (an original context of 8 puts the frequencies of head dim 8 or
// 16 in the kept, smoothed and scaled bands), `positions` positions, a tied head or not.
inline ModelConfig tiny_llama_config(int64_t positions, bool tied) {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.model_type = "llama";
  c.vocab_size = kVocab;
  c.max_position_embeddings = positions;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = kQueryHeads;
  c.num_kv_heads = kKvHeads;
  c.intermediate_size = 48;
  c.hidden_act = "silu";
  c.rope_theta = 500000.0;
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8;
  c.tie_word_embeddings = tied;
  return c;
}

// tiny_llama_config untied, with q/k/v/o and MLP biases, linear RoPE scaling and a sliding window
// of 5 on layer 0.
inline ModelConfig tiny_llama_biased_config(int64_t positions) {
  ModelConfig c = tiny_llama_config(positions, /*tied=*/false);
  c.rope_scaling = {};
  c.rope_scaling.type = "linear";
  c.rope_scaling.factor = 2.0;
  c.attention_bias = true;
  c.mlp_bias = true;
  c.sliding_window = 5;
  c.sliding_layers = {true, false};
  return c;
}

// Qwen3: tiny_llama_config untied with q_norm / k_norm over each head and head_dim 12, unequal to
// hidden / heads (so q_proj is (Hq*12, 32) and o_proj (32, Hq*12)), a sliding window of 5 on
// layer 1.
inline ModelConfig tiny_qwen3_config(int64_t positions) {
  ModelConfig c = tiny_llama_config(positions, /*tied=*/false);
  c.model_type = "qwen3";
  c.qk_norm = true;
  c.explicit_head_dim = 12;
  c.norm_eps = 1e-6;
  c.sliding_window = 5;
  c.sliding_layers = {false, true};
  return c;
}

// Phi-3: tiny_llama_config tied, with longrope (original context 4, so the long factors and the
// attention factor apply to every sequence of the tests) and a sliding window of 5 on every layer.
// Its fused qkv_proj / gate_up_proj are the HF files' business: the model sees q, k, v, gate, up.
inline ModelConfig tiny_phi3_config(int64_t positions) {
  ModelConfig c = tiny_llama_config(positions, /*tied=*/true);
  c.model_type = "phi3";
  c.rope_theta = 10000.0;
  c.rope_scaling = {};
  c.rope_scaling.type = "longrope";
  c.rope_scaling.original_max_position_embeddings = 4;
  c.rope_scaling.factor = static_cast<double>(positions) / 4.0;
  c.rope_scaling.attention_factor =
      std::sqrt(1.0 + std::log(c.rope_scaling.factor) / std::log(4.0));
  for (int64_t i = 0; i < c.head_dim() / 2; ++i) {
    c.rope_scaling.short_factor.push_back(1.0 + 0.25 * static_cast<double>(i));
    c.rope_scaling.long_factor.push_back(1.5 + static_cast<double>(i * i));
  }
  c.sliding_window = 5;
  c.sliding_layers = {true, true};
  return c;
}

// Gemma 3 (text): (1 + w) norms incl. q_norm / k_norm, post-norms, GeGLU, embeddings times
// sqrt(32), query_pre_attn_scalar 20, head_dim 12, layer 0 sliding (window 5) with its own RoPE
// base, layer 1 global with linear RoPE, tied.
inline ModelConfig tiny_gemma3_config(int64_t positions) {
  ModelConfig c = tiny_llama_config(positions, /*tied=*/true);
  c.model_type = "gemma3_text";
  c.hidden_act = "gelu_pytorch_tanh";
  c.qk_norm = c.post_norms = true;
  c.norm_weight_offset = 1.0;
  c.norm_eps = 1e-6;
  c.embedding_scale = static_cast<float>(std::sqrt(32.0));
  c.query_pre_attn_scalar = 20.0;
  c.explicit_head_dim = 12;
  c.rope_theta = 1e6;
  c.rope_scaling = {};
  c.rope_scaling.type = "linear";
  c.rope_scaling.factor = 2.0;
  c.local_rope_theta = 1e4;
  c.sliding_window = 5;
  c.sliding_layers = {true, false};
  return c;
}

// Gemma 2: tiny_gemma3_config without q_norm / k_norm and with one RoPE (default, no scaling),
// layer 0 sliding (window 5: Gemma2Config's even layers), and both soft-caps near the tiny model's
// scores (about +-1) and logits (about +-2), so tanh bends them: attention 1, final logits 2.
inline ModelConfig tiny_gemma2_config(int64_t positions) {
  ModelConfig c = tiny_gemma3_config(positions);
  c.model_type = "gemma2";
  c.qk_norm = false;
  c.rope_theta = 1e4;
  c.rope_scaling = {};
  c.local_rope_theta = 0.0;
  c.attn_logit_softcapping = 1.0;
  c.final_logit_softcapping = 2.0;
  return c;
}

}  // namespace zero::model::testing
