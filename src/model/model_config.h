// ModelConfig: the architecture of a decoder-only transformer, read from / written to HF
// config.json. Covers GPT-2 ("gpt2") and the Llama family ("llama", "mistral", "qwen2": RMSNorm,
// RoPE, GQA, SwiGLU).
#pragma once

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
  std::string model_type = "gpt2";  // HF model_type as read: gpt2, llama, mistral, qwen2
  int64_t vocab_size = 50257;
  int64_t max_position_embeddings = 1024;  // GPT-2: n_positions
  int64_t hidden_size = 768;               // GPT-2: n_embd
  int64_t num_layers = 12;                 // n_layer / num_hidden_layers
  int64_t num_heads = 12;                  // n_head / num_attention_heads
  int64_t num_kv_heads = 12;               // num_key_value_heads (== num_heads for GPT-2)
  int64_t intermediate_size = 3072;        // GPT-2: n_inner or 4 * n_embd
  double norm_eps = 1e-5;                  // layer_norm_epsilon / rms_norm_eps
  double rope_theta = 10000.0;
  kernels::cpu::RopeScaling rope_scaling;  // type "default" when absent
  bool tie_word_embeddings = true;
  bool attention_bias = false;  // Llama family: q/k/v (and o for llama) biases; Qwen2: q/k/v only
  bool mlp_bias = false;
  std::string hidden_act = "gelu_new";  // GPT-2: activation_function; Llama: hidden_act ("silu")
  double initializer_range = 0.02;
  // The whole config.json as read, so keys we do not model are written back unchanged.
  nlohmann::json original;

  int64_t head_dim() const { return hidden_size / num_heads; }
};

// Parses an HF config.json object. Errors name the key (e.g. "config.json: num_attention_heads:
// ...").
StatusOr<ModelConfig> model_config_from_json(const nlohmann::json& j, std::string_view source_name);
// Reads DIR/config.json (or a path to a config.json file).
StatusOr<ModelConfig> load_model_config(const std::string& path);
// HF config.json for this model (original keys kept, ours updated).
nlohmann::json model_config_to_json(const ModelConfig& config);

// Built-in presets for random initialisation: gpt2-tiny, gpt2-124m, gpt2-350m, gpt2-774m,
// gpt2-1558m, llama-tiny, llama-1b (Llama-3.2-1B shape), ... `name` is without the "preset:"
// prefix.
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
ParamCounts count_params(const ModelConfig& config);

}  // namespace zero::model
