// ModelConfig: the architecture of a decoder-only transformer, read from / written to HF
// config.json. Covers GPT-2 ("gpt2") and the Llama family ("llama", "mistral", "qwen2", "qwen3",
// "phi3": RMSNorm, RoPE, GQA, SwiGLU; Qwen3 adds RMSNorm over each head's queries and keys; Phi-3
// fuses projections in its files and has longrope) and Gemma 2 / 3 ("gemma2", "gemma3_text").
// docs/model_families.md.
#pragma once

#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "kernels/rope/rope.h"

namespace zero::model {

enum class Arch { kGpt2, kLlama };

struct ModelConfig {
  Arch arch = Arch::kGpt2;
  std::string model_type = "gpt2";  // HF model_type: gpt2, llama, mistral, qwen2, qwen3, phi3
  int64_t vocab_size = 50257;
  int64_t max_position_embeddings = 1024;  // GPT-2: n_positions
  int64_t hidden_size = 768;               // GPT-2: n_embd
  int64_t num_layers = 12;                 // n_layer / num_hidden_layers
  int64_t num_heads = 12;                  // n_head / num_attention_heads
  int64_t num_kv_heads = 12;               // num_key_value_heads (== num_heads for GPT-2)
  // Llama family `head_dim` when it is not hidden_size / num_heads (Qwen3, Mistral-Nemo); 0:
  // derived.
  int64_t explicit_head_dim = 0;
  int64_t intermediate_size = 3072;  // GPT-2: n_inner or 4 * n_embd
  double norm_eps = 1e-5;            // layer_norm_epsilon / rms_norm_eps
  double rope_theta = 10000.0;
  kernels::cpu::RopeScaling rope_scaling;  // type "default" when absent
  bool tie_word_embeddings = true;
  bool attention_bias = false;  // Llama family: q/k/v (and o for llama) biases; Qwen2: q/k/v only
  bool mlp_bias = false;
  // Qwen3: RMSNorm (weights q_norm, k_norm of size head_dim, eps norm_eps) over each head's query
  // and key vectors, after the projections and before RoPE.
  bool qk_norm = false;
  std::string hidden_act = "gelu_new";  // GPT-2: activation_function; Llama: hidden_act ("silu")
  double initializer_range = 0.02;
  // Gemma 3 ("gemma3_text"): norm weights stored as w and applied as (norm_weight_offset + w), i.e.
  // (1 + w); norms after attention and after the MLP too (post_norms: post_attention_layernorm,
  // post_feedforward_layernorm; the MLP's own is pre_feedforward_layernorm); the MLP's gate through
  // hidden_act "gelu_pytorch_tanh"; token embeddings times embedding_scale (fp32 sqrt(hidden), as
  // transformers' fp32 buffer); scores times query_pre_attn_scalar^-1/2 instead of head_dim^-1/2
  // (0: head_dim); the sliding layers with their own RoPE (local_rope_theta > 0).
  double norm_weight_offset = 0.0;
  bool post_norms = false;
  float embedding_scale = 1.0f;
  double query_pre_attn_scalar = 0.0;
  double local_rope_theta = 0.0;
  kernels::cpu::RopeScaling local_rope_scaling;
  // Gemma 2 ("gemma2", the Gemma 3 block without q_norm / k_norm): attention scores become
  // cap * tanh(score / cap) before the softmax, and the logits likewise (0: no capping).
  double attn_logit_softcapping = 0.0;
  double final_logit_softcapping = 0.0;
  // Sliding-window attention (Mistral `sliding_window`; Qwen2 `use_sliding_window` from layer
  // `max_window_layers` on; transformers-5 `layer_types`): the window, and which layers use it
  // (empty: none). Query t sees keys s with t - s < sliding_window.
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;
  // GPT-2 `scale_attn_by_inverse_layer_idx`: layer l's scores are also divided by l + 1.
  bool scale_attn_by_inverse_layer_idx = false;
  // Warnings from reading config.json (keys accepted that HF uses differently, e.g. dropout).
  std::vector<std::string> warnings;
  // The whole config.json as read, so keys we do not model are written back unchanged (for a
  // language model inside a multimodal checkpoint: its text_config).
  nlohmann::json original;
  // A multimodal checkpoint whose language model this is ("gemma3": Gemma3ForConditionalGeneration,
  // the model read from its text_config; "" otherwise), and that checkpoint's whole config.json,
  // written back around the language model's. Its weights are named language_model.model.* and
  // language_model.lm_head.* (model.language_model.* and lm_head.* are read too); the vision
  // tower's and the projector's tensors are not trained, and are copied through on save from
  // `source_dir` (the directory the model was read from).
  std::string multimodal_type;
  nlohmann::json multimodal_original;
  std::string source_dir;
  // generation_config.json next to the config.json read (null if there was none).
  nlohmann::json generation_config;

  int64_t head_dim() const {
    return explicit_head_dim > 0 ? explicit_head_dim : hidden_size / num_heads;
  }
  // Layer l's attention window (0: full causal) and extra score divisor.
  int64_t attention_window(int64_t layer) const {
    return layer < static_cast<int64_t>(sliding_layers.size()) &&
                   sliding_layers[static_cast<size_t>(layer)]
               ? sliding_window
               : 0;
  }
  double attention_score_divisor(int64_t layer) const {
    // Gemma: q.k * query_pre_attn_scalar^-1/2 = q.k / sqrt(D) / (sqrt(qpas) / sqrt(D)).
    if (query_pre_attn_scalar > 0) {
      return std::sqrt(query_pre_attn_scalar) / std::sqrt(static_cast<double>(head_dim()));
    }
    return scale_attn_by_inverse_layer_idx ? static_cast<double>(layer + 1) : 1.0;
  }
  // Whether layer l rotates with the sliding layers' own RoPE tables (Gemma 3).
  bool uses_local_rope(int64_t layer) const {
    return local_rope_theta > 0 && attention_window(layer) > 0;
  }
};

// Sanity limits on a model read from config.json, checked before anything is sized from it: every
// dimension (vocab, hidden, intermediate, positions, heads, window) fits in an int32; layers are
// far beyond any real model (the deepest published decoders have a few hundred); the parameter
// count times the bytes of training state per parameter fits in an int64.
inline constexpr int64_t kMaxModelDimension = 2147483647;  // 2^31 - 1
inline constexpr int64_t kMaxModelLayers = 65536;
inline constexpr int64_t kMaxModelParams = 1'000'000'000'000'000;  // 1e15

// Parses an HF config.json object. Errors name the key (e.g. "config.json: num_attention_heads:
// ...").
StatusOr<ModelConfig> model_config_from_json(const nlohmann::json& j, std::string_view source_name);
// Largest config.json / generation_config.json read (real ones are a few KiB).
inline constexpr uint64_t kMaxModelConfigBytes = uint64_t{16} << 20;

// Reads DIR/config.json (or a path to a config.json file). Only a regular file of at most
// kMaxModelConfigBytes is read (a FIFO or a device is refused without blocking).
StatusOr<ModelConfig> load_model_config(const std::string& path);
// HF config.json for this model (original keys kept, ours updated), in the layout read: the 4.x
// top-level rope_theta / rope_scaling / torch_dtype, or transformers-5 rope_parameters / dtype
// (both kept consistent when the input had both). `dtype` ("float32", "bfloat16", "float16") is the
// saved weights' dtype; empty keeps the input's.
nlohmann::json model_config_to_json(const ModelConfig& config, std::string_view dtype = {});
// generation_config.json to save beside it: the one read, or one made from bos/eos_token_id.
nlohmann::json generation_config_to_json(const ModelConfig& config);

// Built-in presets for random initialisation: gpt2-tiny, gpt2-124m, gpt2-350m, gpt2-774m,
// gpt2-1558m, llama-tiny, llama-1b (Llama-3.2-1B shape), llama-8b, llama-13b (Llama-2-13B shape),
// qwen3-tiny, qwen3-8b (Qwen3-8B shape), phi-3-mini (Phi-3-mini-4k shape), gemma3-tiny, gemma-3-4b
// (Gemma 3 4B's language model).
// `name` is with or without the "preset:" prefix.
StatusOr<ModelConfig> preset_model_config(std::string_view name);
std::vector<std::string> preset_names();

// Parameter counts (tied embeddings counted once), and DeepSpeed's "largest layer": the largest
// single module's parameter count (e.g. the token embedding for GPT-2).
struct ParamCounts {
  int64_t embedding = 0;   // token (+ position) embeddings
  int64_t per_block = 0;   // one transformer block
  int64_t final_norm = 0;  // final norm
  int64_t head = 0;        // untied LM head (0 when tied)
  int64_t total = 0;
  int64_t largest_layer = 0;
};
// REQUIRES: checked_count_params(config) succeeds (true of every config model_config_from_json
// returns and of the presets).
ParamCounts count_params(const ModelConfig& config);
// The counts, or kInvalidArgument when they overflow int64.
StatusOr<ParamCounts> checked_count_params(const ModelConfig& config);

}  // namespace zero::model
