// ModelConfig <-> HF config.json (GPT-2 and the Llama family), built-in presets, and exact
// parameter counts (the numel sum PyTorch reports for GPT2LMHeadModel / LlamaForCausalLM & co).
#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>

#include <spdlog/spdlog.h>

#include "core/check.h"
#include "core/checked_math.h"
#include "core/regular_file.h"
#include "model/config_reader.h"
#include "model/rope_config.h"

namespace zero::model {
namespace {

using config_json::json_type_name;
using config_json::parse_rope;
using config_json::Reader;
using config_json::rope_object;
using nlohmann::json;

// The HF class names we can load for each model_type (causal LMs only).
const char* causal_lm_class(std::string_view model_type) {
  if (model_type == "gpt2") return "GPT2LMHeadModel";
  if (model_type == "llama") return "LlamaForCausalLM";
  if (model_type == "mistral") return "MistralForCausalLM";
  if (model_type == "qwen2") return "Qwen2ForCausalLM";
  if (model_type == "qwen3") return "Qwen3ForCausalLM";
  if (model_type == "phi3") return "Phi3ForCausalLM";
  if (model_type == "gemma3_text") return "Gemma3ForCausalLM";
  if (model_type == "gemma2") return "Gemma2ForCausalLM";
  return nullptr;
}

// Keys of other families' configs that change the math of a model none of ours computes: present
// with a value other than null, 0 or false, the config is refused rather than trained as something
// else (a mixture of experts read as its dense trunk, a soft-capped model without its caps).
Status refuse_unmodelled_keys(const Reader& r, std::string_view model_type) {
  struct Unmodelled {
    const char* key;
    const char* what;
  };
  static const Unmodelled kKeys[] = {
      {"num_experts", "a mixture-of-experts model (ZeRO.cpp's models are dense)"},
      {"num_local_experts", "a mixture-of-experts model (ZeRO.cpp's models are dense)"},
      {"n_routed_experts", "a mixture-of-experts model (ZeRO.cpp's models are dense)"},
      {"num_experts_per_tok", "a mixture-of-experts model (ZeRO.cpp's models are dense)"},
      {"moe_intermediate_size", "a mixture-of-experts model (ZeRO.cpp's models are dense)"},
      {"attn_logit_softcapping", "attention-score soft-capping"},
      {"final_logit_softcapping", "final-logit soft-capping"},
      {"query_pre_attn_scalar", "a query scale other than 1/sqrt(head_dim)"},
      {"rope_local_base_freq", "a separate RoPE base for sliding-window layers"},
  };
  for (const Unmodelled& u : kKeys) {
    const json* v = r.find(u.key);
    if (v == nullptr || v->is_null() || (v->is_boolean() && !v->get<bool>()) ||
        (v->is_number() && v->get<double>() == 0.0)) {
      continue;
    }
    return unimplemented("{}: {}: {} asks for {}, which model_type \"{}\" does not compute here",
                         r.source(), u.key, v->dump(), u.what, model_type);
  }
  return ok_status();
}

// Families transformers has that read as close relatives of ours but compute differently; named
// in the refusal so that nobody takes it for a typo.
const char* unsupported_family_reason(std::string_view model_type) {
  if (model_type == "gemma") {
    return "Gemma 1 (GeGLU without the post-norms) is not implemented (gemma2 and gemma3_text are)";
  }
  if (model_type == "phi" || model_type == "phimoe") {
    return "Phi-1 / Phi-2 (partial rotary embeddings, LayerNorm, a parallel block) and Phi-MoE are "
           "not implemented (phi3 is)";
  }
  if (model_type == "mixtral" || model_type == "qwen2_moe" || model_type == "qwen3_moe") {
    return "mixture-of-experts models are not implemented (ZeRO.cpp's models are dense)";
  }
  return "unknown to ZeRO.cpp";
}

Status check_architectures(const json& j, std::string_view source, std::string_view model_type) {
  auto it = j.find("architectures");
  if (it == j.end() || it->is_null()) return ok_status();
  if (!it->is_array()) {
    return invalid_argument("{}: architectures: expected an array of strings, got {}", source,
                            json_type_name(*it));
  }
  const std::string want = causal_lm_class(model_type);
  for (const json& a : *it) {
    if (!a.is_string()) {
      return invalid_argument("{}: architectures: expected an array of strings, got {} inside",
                              source, json_type_name(a));
    }
    if (a.get<std::string>() != want) {
      return unimplemented(
          "{}: architectures: \"{}\" is not supported for model_type \"{}\" (only {})", source,
          a.get<std::string>(), model_type, want);
    }
  }
  return ok_status();
}

Status parse_gpt2(const Reader& r, ModelConfig& c) {
  c.arch = Arch::kGpt2;
  ZERO_ASSIGN_OR_RETURN(c.vocab_size, r.positive_int("vocab_size", std::nullopt));
  ZERO_ASSIGN_OR_RETURN(c.max_position_embeddings, r.positive_int("n_positions", std::nullopt));
  ZERO_ASSIGN_OR_RETURN(c.hidden_size, r.positive_int("n_embd", std::nullopt));
  ZERO_ASSIGN_OR_RETURN(c.num_layers, r.positive_int("n_layer", std::nullopt, kMaxModelLayers));
  ZERO_ASSIGN_OR_RETURN(c.num_heads, r.positive_int("n_head", std::nullopt));
  c.num_kv_heads = c.num_heads;
  ZERO_ASSIGN_OR_RETURN(c.intermediate_size, r.positive_int("n_inner", 4 * c.hidden_size));
  ZERO_ASSIGN_OR_RETURN(c.norm_eps, r.positive_number("layer_norm_epsilon", 1e-5));
  ZERO_ASSIGN_OR_RETURN(c.hidden_act, r.string("activation_function", "gelu_new"));
  if (c.hidden_act != "gelu_new" && c.hidden_act != "gelu_pytorch_tanh") {
    return unimplemented(
        "{}: activation_function: \"{}\" is not supported (gelu_new or gelu_pytorch_tanh)",
        r.source(), c.hidden_act);
  }
  ZERO_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.boolean("tie_word_embeddings", true));
  ZERO_ASSIGN_OR_RETURN(bool scale_weights, r.boolean("scale_attn_weights", true));
  if (!scale_weights) {
    return unimplemented(
        "{}: scale_attn_weights: false is not supported (scores are always "
        "divided by sqrt(head_dim))",
        r.source());
  }
  ZERO_ASSIGN_OR_RETURN(c.scale_attn_by_inverse_layer_idx,
                        r.boolean("scale_attn_by_inverse_layer_idx", false));
  ZERO_ASSIGN_OR_RETURN(bool cross, r.boolean("add_cross_attention", false));
  if (cross) return unimplemented("{}: add_cross_attention: true is not supported", r.source());
  // reorder_and_upcast_attn only changes the precision HF computes the scores in (fp32 instead of
  // the model dtype); ZeRO.cpp computes attention in fp32 anyway, so either value is the same math.
  ZERO_ASSIGN_OR_RETURN(bool reorder, r.boolean("reorder_and_upcast_attn", false));
  (void)reorder;
  for (const char* key : {"attn_pdrop", "resid_pdrop", "embd_pdrop"}) {
    const json* d = r.find(key);
    if (d != nullptr && d->is_number() && d->get<double>() != 0.0) {
      c.warnings.push_back(
          fmt::format("{}: {}: {} is not applied (ZeRO.cpp trains without dropout)", r.source(),
                      key, d->get<double>()));
    }
  }
  // attention_bias / mlp_bias stay false: they describe the Llama family only (GPT-2 always has
  // biases on c_attn / c_proj / c_fc).
  return ok_status();
}

// Which layers use sliding-window attention, and the window. Mistral: every layer when
// sliding_window is set; Qwen2: layers >= max_window_layers when use_sliding_window; either
// overridden by an explicit transformers-5 `layer_types`.
Status parse_sliding_window(const Reader& r, ModelConfig& c) {
  const std::string_view source = r.source();
  std::vector<bool> sliding(static_cast<size_t>(c.num_layers), false);
  if (c.model_type == "mistral" || c.model_type == "phi3") {  // Phi-3: every layer too
    if (const json* w = r.find("sliding_window"); w != nullptr && !w->is_null()) {
      sliding.assign(sliding.size(), true);
    }
  } else if (c.model_type == "gemma2") {
    // Gemma2Config: even layers sliding, odd global (transformers 5 also writes layer_types).
    for (int64_t i = 0; i < c.num_layers; ++i) sliding[static_cast<size_t>(i)] = i % 2 == 0;
  } else if (c.model_type == "gemma3_text") {
    // transformers 4.x: every sliding_window_pattern-th layer global (5 has layer_types).
    ZERO_ASSIGN_OR_RETURN(int64_t pattern, r.positive_int("sliding_window_pattern", 6));
    for (int64_t i = 0; i < c.num_layers; ++i)
      sliding[static_cast<size_t>(i)] = (i + 1) % pattern != 0;
  } else if (c.model_type == "qwen2" || c.model_type == "qwen3") {
    ZERO_ASSIGN_OR_RETURN(bool use, r.boolean("use_sliding_window", false));
    if (use) {
      ZERO_ASSIGN_OR_RETURN(int64_t from, r.positive_int("max_window_layers", c.num_layers));
      for (int64_t i = from; i < c.num_layers; ++i) sliding[static_cast<size_t>(i)] = true;
    }
  }
  if (const json* types = r.find("layer_types"); types != nullptr && !types->is_null()) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != c.num_layers) {
      return invalid_argument(
          "{}: layer_types: expected an array of {} strings (num_hidden_layers)", source,
          c.num_layers);
    }
    for (size_t i = 0; i < types->size(); ++i) {
      const json& t = (*types)[i];
      if (t == "full_attention") {
        sliding[i] = false;
      } else if (t == "sliding_attention") {
        sliding[i] = true;
      } else {
        return unimplemented("{}: layer_types[{}]: {} is not supported", source, i, t.dump());
      }
    }
  }
  if (std::find(sliding.begin(), sliding.end(), true) == sliding.end()) return ok_status();
  c.sliding_layers = sliding;
  const json* w = r.find("sliding_window");
  if (c.model_type == "gemma3_text" || c.model_type == "gemma2") {  // their configs' default
    ZERO_ASSIGN_OR_RETURN(c.sliding_window, r.positive_int("sliding_window", 4096));
    return ok_status();
  }
  if (w == nullptr || w->is_null()) {
    return invalid_argument("{}: sliding_window: missing, but layers use sliding-window attention",
                            source);
  }
  ZERO_ASSIGN_OR_RETURN(c.sliding_window, r.positive_int("sliding_window", std::nullopt));
  return ok_status();
}

// head_dim: transformers' attention reads config.head_dim, which may differ from hidden_size /
// num_attention_heads (Qwen3, Mistral-Nemo); absent, it is that quotient, except for Qwen3, whose
// config class defaults it to 128.
Status parse_head_dim(const Reader& r, ModelConfig& c) {
  // Qwen3Config and Gemma3TextConfig default head_dim to 128 and 256.
  int64_t fallback_value = 0;
  if (c.model_type == "qwen3") fallback_value = 128;
  if (c.model_type == "gemma3_text" || c.model_type == "gemma2") fallback_value = 256;
  std::optional<int64_t> fallback;
  if (fallback_value > 0) fallback = fallback_value;
  const json* head_dim = r.find("head_dim");
  if ((head_dim == nullptr || head_dim->is_null()) && !fallback) {
    if (c.hidden_size % c.num_heads != 0) {
      return invalid_argument(
          "{}: num_attention_heads: {} does not divide hidden_size {} (and head_dim is not given)",
          r.source(), c.num_heads, c.hidden_size);
    }
    return ok_status();
  }
  ZERO_ASSIGN_OR_RETURN(int64_t hd, r.positive_int("head_dim", fallback));
  const bool derived = c.hidden_size % c.num_heads == 0 && hd == c.hidden_size / c.num_heads;
  c.explicit_head_dim = derived ? 0 : hd;
  return ok_status();
}

// Gemma 2's soft-capping (Gemma2Config's defaults 50 and 30; null: none); refused for Gemma 3.
Status parse_softcaps(const Reader& r, ModelConfig& c, bool gemma2) {
  struct Cap {
    const char* key;
    double* dst;
    double fallback;
  };
  for (const Cap& cap : {Cap{"attn_logit_softcapping", &c.attn_logit_softcapping, 50.0},
                         Cap{"final_logit_softcapping", &c.final_logit_softcapping, 30.0}}) {
    const json* v = r.find(cap.key);
    if (!gemma2) {
      if (v != nullptr && !v->is_null()) {
        return unimplemented("{}: {}: {} (soft-capping) is not computed for gemma3_text here",
                             r.source(), cap.key, v->dump());
      }
      continue;
    }
    if (v != nullptr && v->is_null()) continue;
    ZERO_ASSIGN_OR_RETURN(*cap.dst, r.positive_number(cap.key, cap.fallback));
  }
  return ok_status();
}

// Gemma 2 and Gemma 3's text model (gemma3_text): Llama's skeleton with (1 + w) norms,
// post-attention and post-feedforward norms, GeGLU, scaled embeddings, query_pre_attn_scalar and
// sliding layers. Gemma 3: q_norm / k_norm, the sliding layers' own RoPE, every
// sliding_window_pattern-th layer global. Gemma 2: one RoPE, every other layer global, attention
// and final-logit soft-capping.
Status parse_gemma(const json& j, const Reader& r, ModelConfig& c) {
  const bool gemma2 = c.model_type == "gemma2";
  if (gemma2) {
    ZERO_RETURN_IF_ERROR(parse_rope(j, r, c));
  } else {
    ZERO_RETURN_IF_ERROR(config_json::parse_gemma3_rope(j, r, c));
  }
  ZERO_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.boolean("tie_word_embeddings", true));
  ZERO_ASSIGN_OR_RETURN(c.hidden_act, r.string("hidden_activation", "gelu_pytorch_tanh"));
  if (c.hidden_act != "gelu_pytorch_tanh") {
    return unimplemented("{}: hidden_activation: \"{}\" is not supported (gelu_pytorch_tanh)",
                         r.source(), c.hidden_act);
  }
  ZERO_ASSIGN_OR_RETURN(c.attention_bias, r.boolean("attention_bias", false));
  c.mlp_bias = false;
  c.qk_norm = !gemma2;
  c.post_norms = true;
  c.norm_weight_offset = 1.0;
  c.embedding_scale = static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size)));
  ZERO_ASSIGN_OR_RETURN(c.query_pre_attn_scalar, r.positive_number("query_pre_attn_scalar", 256.0));
  ZERO_RETURN_IF_ERROR(parse_softcaps(r, c, gemma2));
  ZERO_ASSIGN_OR_RETURN(bool bidirectional, r.boolean("use_bidirectional_attention", false));
  if (bidirectional) {
    return unimplemented("{}: use_bidirectional_attention: true is not supported (causal only)",
                         r.source());
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return invalid_argument("{}: num_key_value_heads: {} does not divide num_attention_heads {}",
                            r.source(), c.num_kv_heads, c.num_heads);
  }
  if (c.head_dim() % 2 != 0) {
    return invalid_argument("{}: head_dim {} must be even for RoPE", r.source(), c.head_dim());
  }
  return parse_sliding_window(r, c);
}

Status parse_llama_family(const json& j, const Reader& r, ModelConfig& c) {
  c.arch = Arch::kLlama;
  ZERO_ASSIGN_OR_RETURN(c.vocab_size, r.positive_int("vocab_size", std::nullopt));
  ZERO_ASSIGN_OR_RETURN(c.hidden_size, r.positive_int("hidden_size", std::nullopt));
  ZERO_ASSIGN_OR_RETURN(c.num_layers,
                        r.positive_int("num_hidden_layers", std::nullopt, kMaxModelLayers));
  ZERO_ASSIGN_OR_RETURN(c.num_heads, r.positive_int("num_attention_heads", std::nullopt));
  ZERO_ASSIGN_OR_RETURN(c.num_kv_heads, r.positive_int("num_key_value_heads", c.num_heads));
  ZERO_ASSIGN_OR_RETURN(c.intermediate_size, r.positive_int("intermediate_size", std::nullopt));
  ZERO_ASSIGN_OR_RETURN(c.max_position_embeddings,
                        r.positive_int("max_position_embeddings", std::nullopt));
  ZERO_ASSIGN_OR_RETURN(c.norm_eps, r.positive_number("rms_norm_eps", 1e-6));
  ZERO_RETURN_IF_ERROR(parse_head_dim(r, c));
  if (c.model_type == "gemma3_text" || c.model_type == "gemma2") return parse_gemma(j, r, c);
  ZERO_RETURN_IF_ERROR(parse_rope(j, r, c));
  ZERO_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.boolean("tie_word_embeddings", false));
  ZERO_ASSIGN_OR_RETURN(c.hidden_act, r.string("hidden_act", "silu"));
  if (c.hidden_act != "silu") {
    return unimplemented("{}: hidden_act: \"{}\" is not supported (only \"silu\")", r.source(),
                         c.hidden_act);
  }
  if (c.model_type == "qwen2") {
    c.attention_bias = true;  // Qwen2 always has q/k/v biases (and none on o_proj)
    c.mlp_bias = false;
  } else if (c.model_type == "mistral" || c.model_type == "phi3") {
    c.attention_bias = false;  // MistralAttention and Phi3Attention / Phi3MLP have no biases
    c.mlp_bias = false;
  } else if (c.model_type == "qwen3") {
    ZERO_ASSIGN_OR_RETURN(c.attention_bias, r.boolean("attention_bias", false));  // q, k, v and o
    c.mlp_bias = false;  // Qwen3MLP has none
  } else {
    ZERO_ASSIGN_OR_RETURN(c.attention_bias, r.boolean("attention_bias", false));
    ZERO_ASSIGN_OR_RETURN(c.mlp_bias, r.boolean("mlp_bias", false));
  }
  c.qk_norm = c.model_type == "qwen3";
  if (c.num_heads % c.num_kv_heads != 0) {
    return invalid_argument("{}: num_key_value_heads: {} does not divide num_attention_heads {}",
                            r.source(), c.num_kv_heads, c.num_heads);
  }
  if (c.head_dim() % 2 != 0) {
    return invalid_argument(
        "{}: head_dim {} (hidden_size / num_attention_heads unless given) must "
        "be even for RoPE",
        r.source(), c.head_dim());
  }
  ZERO_RETURN_IF_ERROR(parse_sliding_window(r, c));
  for (const char* key : {"attention_dropout", "resid_pdrop", "embd_pdrop"}) {  // Phi-3: all three
    if (const json* d = r.find(key); d != nullptr && d->is_number() && d->get<double>() != 0.0) {
      c.warnings.push_back(
          fmt::format("{}: {}: {} is not applied (ZeRO.cpp trains without dropout)", r.source(),
                      key, d->get<double>()));
    }
  }
  return ok_status();
}

ModelConfig gpt2_preset(int64_t vocab, int64_t positions, int64_t embd, int64_t layers,
                        int64_t heads) {
  ModelConfig c;
  c.arch = Arch::kGpt2;
  c.model_type = "gpt2";
  c.vocab_size = vocab;
  c.max_position_embeddings = positions;
  c.hidden_size = embd;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = heads;
  c.intermediate_size = 4 * embd;
  c.norm_eps = 1e-5;
  c.tie_word_embeddings = true;
  c.hidden_act = "gelu_new";
  return c;
}

ModelConfig llama_preset(int64_t vocab, int64_t hidden, int64_t layers, int64_t heads,
                         int64_t kv_heads, int64_t intermediate, int64_t max_positions,
                         double rope_theta, bool tied) {
  ModelConfig c;
  c.arch = Arch::kLlama;
  c.model_type = "llama";
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.intermediate_size = intermediate;
  c.max_position_embeddings = max_positions;
  c.norm_eps = 1e-5;
  c.rope_theta = rope_theta;
  c.tie_word_embeddings = tied;
  c.attention_bias = false;
  c.mlp_bias = false;
  c.hidden_act = "silu";
  return c;
}

}  // namespace

namespace {

// A multimodal Gemma 3 checkpoint (Gemma3ForConditionalGeneration): its language model, read from
// text_config; the vision tower and projector stay as they are (ModelConfig::multimodal_type).
StatusOr<ModelConfig> multimodal_gemma3_config(const json& j, std::string_view source_name) {
  auto tc = j.find("text_config");
  if (tc == j.end() || !tc->is_object()) {
    return invalid_argument(
        "{}: text_config: missing or not an object (model_type \"gemma3\" is the multimodal Gemma "
        "3 checkpoint, whose language model is configured there)",
        source_name);
  }
  json inner = *tc;
  if (!inner.contains("model_type")) inner["model_type"] = "gemma3_text";
  if (inner["model_type"] != "gemma3_text") {
    return invalid_argument("{}: text_config.model_type: {} (expected \"gemma3_text\")",
                            source_name, inner["model_type"].dump());
  }
  // The outer tie_word_embeddings is what Gemma3ForConditionalGeneration ties by; the two agree in
  // every published checkpoint, and a disagreement is not guessed at.
  auto outer_tie = j.find("tie_word_embeddings");
  if (outer_tie != j.end() && outer_tie->is_boolean()) {
    auto inner_tie = inner.find("tie_word_embeddings");
    if (inner_tie != inner.end() && inner_tie->is_boolean() && *inner_tie != *outer_tie) {
      return invalid_argument(
          "{}: tie_word_embeddings {} disagrees with text_config.tie_word_embeddings {}",
          source_name, outer_tie->dump(), inner_tie->dump());
    }
    inner["tie_word_embeddings"] = *outer_tie;
  }
  ZERO_ASSIGN_OR_RETURN(ModelConfig c,
                        model_config_from_json(inner, fmt::format("{}: text_config", source_name)));
  c.original = *tc;
  c.multimodal_type = "gemma3";
  c.multimodal_original = j;
  return c;
}

}  // namespace

StatusOr<ModelConfig> model_config_from_json(const nlohmann::json& j,
                                             std::string_view source_name) {
  if (!j.is_object()) {
    return invalid_argument("{}: expected a JSON object, got {}", source_name, json_type_name(j));
  }
  Reader r(j, source_name);
  ModelConfig c;
  c.original = j;
  const json* model_type = r.find("model_type");
  if (model_type == nullptr) return invalid_argument("{}: model_type: missing", source_name);
  if (!model_type->is_string()) return r.type_error("model_type", "a string", *model_type);
  c.model_type = model_type->get<std::string>();
  if (c.model_type == "gemma3") return multimodal_gemma3_config(j, source_name);
  if (causal_lm_class(c.model_type) == nullptr) {
    return unimplemented(
        "{}: model_type: \"{}\" is not supported: {} (supported: gpt2, llama, mistral, qwen2, "
        "qwen3, phi3, gemma2, gemma3_text, and gemma3's language model)",
        source_name, c.model_type, unsupported_family_reason(c.model_type));
  }
  ZERO_RETURN_IF_ERROR(check_architectures(j, source_name, c.model_type));
  if (c.model_type != "gemma3_text" && c.model_type != "gemma2") {
    ZERO_RETURN_IF_ERROR(refuse_unmodelled_keys(r, c.model_type));
  }
  if (c.model_type == "gpt2") {
    ZERO_RETURN_IF_ERROR(parse_gpt2(r, c));
  } else {
    ZERO_RETURN_IF_ERROR(parse_llama_family(j, r, c));
  }
  if (c.explicit_head_dim == 0 && c.hidden_size % c.num_heads != 0) {
    return invalid_argument("{}: number of heads {} does not divide the hidden size {}",
                            source_name, c.num_heads, c.hidden_size);
  }
  // The parameter count must fit (checked arithmetic), and stay below kMaxModelParams so that every
  // byte count derived from it (weights, gradients, optimizer state) fits in 64 bits.
  auto counts = checked_count_params(c);
  if (!counts.ok()) return counts.status().with_context(std::string(source_name));
  if (counts->total > kMaxModelParams) {
    return invalid_argument("{}: {} parameters is more than the limit {} (check the dimensions)",
                            source_name, counts->total, kMaxModelParams);
  }
  ZERO_ASSIGN_OR_RETURN(c.initializer_range, r.positive_number("initializer_range", 0.02));
  const json* dtype = r.find("dtype");
  const json* torch_dtype = r.find("torch_dtype");
  if (dtype != nullptr && torch_dtype != nullptr && !dtype->is_null() && !torch_dtype->is_null() &&
      *dtype != *torch_dtype) {
    return invalid_argument("{}: dtype: {} disagrees with torch_dtype {} (remove one)", source_name,
                            dtype->dump(), torch_dtype->dump());
  }
  return c;
}

StatusOr<ModelConfig> load_model_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path file = path;
  if (fs::is_directory(file, ec)) file /= "config.json";
  auto text = read_regular_file(file.string(), kMaxModelConfigBytes, "an HF config.json");
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return not_found("{}: cannot open model config: no such file", file.string());
    }
    return text.status();
  }
  json j;
  try {
    j = json::parse(*text);
  } catch (const json::parse_error& e) {
    return invalid_argument("{}: invalid JSON: {}", file.string(), e.what());
  }
  ZERO_ASSIGN_OR_RETURN(ModelConfig c, model_config_from_json(j, file.string()));
  for (const std::string& w : c.warnings) spdlog::warn("{}", w);
  c.source_dir = fs::absolute(file.parent_path(), ec).string();
  // generation_config.json beside it is kept, to be saved with the model.
  fs::path gen = file.parent_path() / "generation_config.json";
  if (fs::exists(gen, ec)) {
    ZERO_ASSIGN_OR_RETURN(
        std::string gen_text,
        read_regular_file(gen.string(), kMaxModelConfigBytes, "an HF generation_config.json"));
    try {
      c.generation_config = json::parse(gen_text);
    } catch (const json::parse_error& e) {
      return invalid_argument("{}: invalid JSON: {}", gen.string(), e.what());
    }
    if (!c.generation_config.is_object()) {
      return invalid_argument("{}: expected a JSON object", gen.string());
    }
  }
  return c;
}

nlohmann::json model_config_to_json(const ModelConfig& c, std::string_view dtype) {
  if (!c.multimodal_type.empty()) {
    // The multimodal checkpoint's config around the language model's (which carries no dtype or
    // architectures of its own there).
    ModelConfig inner = c;
    inner.multimodal_type.clear();
    json text = model_config_to_json(inner, {});
    text.erase("architectures");
    if (!c.original.contains("dtype")) text.erase("dtype");
    if (!c.original.contains("torch_dtype")) text.erase("torch_dtype");
    json outer = c.multimodal_original;
    outer["text_config"] = text;
    if (!dtype.empty()) {
      if (outer.contains("dtype") || !outer.contains("torch_dtype")) outer["dtype"] = dtype;
      if (outer.contains("torch_dtype")) outer["torch_dtype"] = dtype;
    }
    return outer;
  }
  json j = c.original.is_object() ? c.original : json::object();
  // The layout read: transformers 5 writes `dtype` and `rope_parameters`, 4.x `torch_dtype` and
  // top-level rope_theta / rope_scaling. Keys present are rewritten consistently.
  const bool v5 =
      j.contains("rope_parameters") || (j.contains("dtype") && !j.contains("torch_dtype"));
  if (!dtype.empty()) {
    if (j.contains("dtype") || v5) j["dtype"] = std::string(dtype);
    if (j.contains("torch_dtype") || !v5) j["torch_dtype"] = std::string(dtype);
  }
  j["model_type"] = c.model_type;
  j["architectures"] = json::array({causal_lm_class(c.model_type)});
  j["vocab_size"] = c.vocab_size;
  j["initializer_range"] = c.initializer_range;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.arch == Arch::kGpt2) {
    j["n_positions"] = c.max_position_embeddings;
    if (j.contains("n_ctx")) j["n_ctx"] = c.max_position_embeddings;
    j["n_embd"] = c.hidden_size;
    j["n_layer"] = c.num_layers;
    j["n_head"] = c.num_heads;
    if (c.intermediate_size == 4 * c.hidden_size) {
      j["n_inner"] = nullptr;
    } else {
      j["n_inner"] = c.intermediate_size;
    }
    j["layer_norm_epsilon"] = c.norm_eps;
    j["activation_function"] = c.hidden_act;
    if (c.scale_attn_by_inverse_layer_idx || j.contains("scale_attn_by_inverse_layer_idx")) {
      j["scale_attn_by_inverse_layer_idx"] = c.scale_attn_by_inverse_layer_idx;
    }
    return j;
  }
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["intermediate_size"] = c.intermediate_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.norm_eps;
  if (c.post_norms) {  // Gemma 2 / 3
    j["head_dim"] = c.head_dim();
    j["hidden_activation"] = c.hidden_act;
    j["query_pre_attn_scalar"] = c.query_pre_attn_scalar;
    if (!j.contains("sliding_window")) j["sliding_window"] = c.sliding_window;  // a preset's
    if (c.model_type == "gemma3_text") {
      config_json::write_gemma3_rope(c, j, v5);
      return j;
    }
  }
  const json* rope_read = j.contains("rope_parameters")
                              ? &j["rope_parameters"]
                              : (j.contains("rope_scaling") ? &j["rope_scaling"] : nullptr);
  json rope = rope_object(c.rope_scaling, rope_read);
  if (v5) {
    json params = rope;
    params["rope_theta"] = c.rope_theta;
    j["rope_parameters"] = params;
  }
  if (!v5 || j.contains("rope_theta")) j["rope_theta"] = c.rope_theta;
  if (!v5 || j.contains("rope_scaling")) {
    j["rope_scaling"] = c.rope_scaling.type == "default" ? json(nullptr) : rope;
  }
  // Sliding window: the keys read are kept as read; a preset's window on every layer (phi-3-mini)
  // is written as Mistral and Phi-3 read it.
  if (!j.contains("sliding_window") && c.sliding_window > 0 &&
      (c.model_type == "mistral" || c.model_type == "phi3")) {
    j["sliding_window"] = c.sliding_window;
  }
  if (!c.post_norms) j["hidden_act"] = c.hidden_act;
  if (j.contains("head_dim") || c.explicit_head_dim > 0 || c.model_type == "qwen3") {
    j["head_dim"] = c.head_dim();
  }
  if (c.model_type == "llama" || c.model_type == "qwen3") j["attention_bias"] = c.attention_bias;
  if (c.model_type == "llama") j["mlp_bias"] = c.mlp_bias;
  return j;
}

nlohmann::json generation_config_to_json(const ModelConfig& c) {
  if (c.generation_config.is_object()) return c.generation_config;
  json g = {{"_from_model_config", true}};
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    auto it = c.original.find(key);
    if (it != c.original.end() && !it->is_null()) g[key] = *it;
  }
  return g;
}

std::vector<std::string> preset_names() {
  return {"gpt2-tiny",  "gpt2-mini",  "gpt2-124m",  "gpt2-350m",   "gpt2-774m",
          "gpt2-1558m", "llama-tiny", "llama-1b",   "llama-8b",    "llama-13b",
          "qwen3-tiny", "qwen3-8b",   "phi-3-mini", "gemma3-tiny", "gemma-3-4b"};
}

StatusOr<ModelConfig> preset_model_config(std::string_view name) {
  if (name.starts_with("preset:")) name.remove_prefix(7);
  // gpt2-tiny: byte-level vocabulary (256), 64-token context, C=64, 2 layers, 4 heads: ~0.12M
  // parameters, trains in seconds on a CPU (unit tests, the quick-start demo).
  if (name == "gpt2-tiny") return gpt2_preset(256, 64, 64, 2, 4);
  // gpt2-mini: byte-level, 128-token context, C=128, 4 layers, 4 heads: ~0.8M parameters, the
  // quick start's model (1800 steps, under 3 minutes on 2 CPU cores, to text of English words).
  if (name == "gpt2-mini") return gpt2_preset(256, 128, 128, 4, 4);
  if (name == "gpt2-124m") return gpt2_preset(50257, 1024, 768, 12, 12);
  if (name == "gpt2-350m") return gpt2_preset(50257, 1024, 1024, 24, 16);
  if (name == "gpt2-774m") return gpt2_preset(50257, 1024, 1280, 36, 20);
  if (name == "gpt2-1558m") return gpt2_preset(50257, 1024, 1600, 48, 25);
  if (name == "llama-tiny") return llama_preset(256, 64, 2, 4, 2, 172, 128, 10000.0, false);
  if (name == "llama-1b") {  // Llama-3.2-1B shape
    ModelConfig c = llama_preset(128256, 2048, 16, 32, 8, 8192, 131072, 500000.0, true);
    c.rope_scaling.type = "llama3";
    c.rope_scaling.factor = 32.0;
    c.rope_scaling.low_freq_factor = 1.0;
    c.rope_scaling.high_freq_factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 8192;
    return c;
  }
  if (name == "llama-8b") {  // Meta-Llama-3-8B shape
    return llama_preset(128256, 4096, 32, 32, 8, 14336, 8192, 500000.0, false);
  }
  if (name == "llama-13b") {  // Llama-2-13B shape: no GQA, 32000-token vocabulary, 4096 context
    return llama_preset(32000, 5120, 40, 40, 40, 13824, 4096, 10000.0, false);
  }
  // Qwen3: q_norm / k_norm, head_dim given (128 for every Qwen3 size).
  auto qwen3 = [](ModelConfig c, int64_t head_dim) {
    c.model_type = "qwen3";
    c.qk_norm = true;
    c.explicit_head_dim = head_dim == c.hidden_size / c.num_heads ? 0 : head_dim;
    c.norm_eps = 1e-6;
    return c;
  };
  // qwen3-tiny: llama-tiny's shape with head_dim 32 (not 64 / 4) and intermediate size 176 (every
  // GEMM row 16-byte aligned in 16 bits): tests and demos.
  if (name == "qwen3-tiny") {
    return qwen3(llama_preset(256, 64, 2, 4, 2, 176, 128, 1000000.0, false), 32);
  }
  if (name == "qwen3-8b") {  // Qwen3-8B shape
    return qwen3(llama_preset(151936, 4096, 36, 32, 8, 12288, 40960, 1000000.0, false), 128);
  }
  // Gemma 3 text: (1 + w) norms, post-norms, GeGLU, scaled embeddings, every 6th layer global.
  auto gemma3 = [](ModelConfig c, int64_t head_dim, int64_t window, double qpas) {
    c.model_type = "gemma3_text";
    c.explicit_head_dim = head_dim == c.hidden_size / c.num_heads ? 0 : head_dim;
    c.norm_eps = 1e-6;
    c.hidden_act = "gelu_pytorch_tanh";
    c.qk_norm = c.post_norms = true;
    c.norm_weight_offset = 1.0;
    c.embedding_scale = static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size)));
    c.query_pre_attn_scalar = qpas;
    c.local_rope_theta = 10000.0;
    c.sliding_window = window;
    c.sliding_layers.resize(static_cast<size_t>(c.num_layers));
    for (int64_t l = 0; l < c.num_layers; ++l)
      c.sliding_layers[static_cast<size_t>(l)] = (l + 1) % 6 != 0;
    return c;
  };
  // gemma3-tiny: llama-tiny's widths, 6 layers (the last global), window 32: tests and demos.
  if (name == "gemma3-tiny") {
    return gemma3(llama_preset(256, 64, 6, 4, 2, 176, 128, 1000000.0, true), 32, 32, 32.0);
  }
  if (name == "gemma-3-4b") {  // Gemma 3 4B's language model: global layers' RoPE linear x8
    ModelConfig c = gemma3(llama_preset(262208, 2560, 34, 8, 4, 10240, 131072, 1000000.0, true),
                           256, 1024, 256.0);
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = 8.0;
    c.rope_scaling.max_position_embeddings = c.max_position_embeddings;
    return c;
  }
  if (name == "phi-3-mini") {  // Phi-3-mini-4k-instruct shape: a window of 2047 on every layer
    ModelConfig c = llama_preset(32064, 3072, 32, 32, 32, 8192, 4096, 10000.0, false);
    c.model_type = "phi3";
    c.sliding_window = 2047;
    c.sliding_layers.assign(32, true);
    return c;
  }
  std::string known;
  for (const std::string& n : preset_names()) known += (known.empty() ? "" : ", ") + n;
  return invalid_argument("preset:{}: unknown model preset (known: {})", name, known);
}

StatusOr<ParamCounts> checked_count_params(const ModelConfig& c) {
  // Every sum and product is overflow-checked (CheckedInt64): an absurd config must be refused,
  // not wrap around to a negative count.
  using N = CheckedInt64;
  const N C = c.hidden_size;
  const N I = c.intermediate_size;
  const N V = c.vocab_size;
  // Each module's own parameters (DeepSpeed's largest-layer definition is the max of these).
  std::vector<N> modules;
  const N token_embedding = V * C;
  modules.push_back(token_embedding);
  N embedding = token_embedding, per_block = 0, final_norm = 0;
  if (c.arch == Arch::kGpt2) {
    const N position_embedding = N(c.max_position_embeddings) * C;
    modules.push_back(position_embedding);
    embedding += position_embedding;
    const N ln = N(2) * C;                     // weight + bias
    const N c_attn = C * N(3) * C + N(3) * C;  // fused qkv (Conv1D) + bias
    const N attn_proj = C * C + C;
    const N c_fc = C * I + I;
    const N mlp_proj = I * C + C;
    modules.insert(modules.end(), {ln, c_attn, attn_proj, c_fc, mlp_proj});
    per_block = N(2) * ln + c_attn + attn_proj + c_fc + mlp_proj;
    final_norm = N(2) * C;
  } else {
    const N q_numel = N(c.num_heads) * N(c.head_dim());
    const N kv_numel = N(c.num_kv_heads) * N(c.head_dim());
    const bool qkv_bias = c.attention_bias;
    const bool o_bias = c.attention_bias && c.model_type != "qwen2";
    const N q_proj = C * q_numel + (qkv_bias ? q_numel : N(0));
    const N kv_proj = C * kv_numel + (qkv_bias ? kv_numel : N(0));  // k_proj and v_proj each
    const N o_proj = q_numel * C + (o_bias ? C : N(0));
    const N up_proj = C * I + (c.mlp_bias ? I : N(0));  // gate_proj and up_proj each
    const N down_proj = I * C + (c.mlp_bias ? C : N(0));
    const N norm = C;
    const N head_norm = c.qk_norm ? N(c.head_dim()) : N(0);  // Qwen3 q_norm and k_norm each
    modules.insert(modules.end(), {q_proj, kv_proj, o_proj, up_proj, down_proj, norm});
    per_block = q_proj + N(2) * kv_proj + o_proj + N(2) * up_proj + down_proj + N(2) * norm +
                N(2) * head_norm + (c.post_norms ? N(2) * norm : N(0));
    final_norm = C;
  }
  const N head = c.tie_word_embeddings ? N(0) : V * C;  // lm_head has no bias; tied shares wte
  if (!c.tie_word_embeddings) modules.push_back(head);
  const N total = embedding + N(c.num_layers) * per_block + final_norm + head;
  N largest = 0;
  for (const N& m : modules) largest = max(largest, m);
  if (total.overflowed() || largest.overflowed()) {
    return invalid_argument(
        "the parameter count of this model overflows a 64-bit integer (vocab_size {}, hidden "
        "size {}, intermediate size {}, {} layers)",
        c.vocab_size, c.hidden_size, c.intermediate_size, c.num_layers);
  }
  ParamCounts p;
  p.embedding = *embedding.get();
  p.per_block = *per_block.get();
  p.final_norm = *final_norm.get();
  p.head = *head.get();
  p.total = *total.get();
  p.largest_layer = *largest.get();
  return p;
}

ParamCounts count_params(const ModelConfig& c) {
  auto counts = checked_count_params(c);
  ZERO_CHECK(counts.ok(), "count_params: ", counts.status().message());
  return *counts;
}

}  // namespace zero::model
