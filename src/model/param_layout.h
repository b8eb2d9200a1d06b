// ModelLayout: the model's parameters grouped into units (embedding, each block, final norm +
// head), each unit one flat fp32 buffer with its parameters as views at fixed offsets
// (docs/design.md §4). The layout is the single source of truth for names, shapes, HF names/layouts
// and weight decay.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/model_config.h"

namespace zero::model {

enum class ParamKind {
  kTokenEmbedding,     // (V, C)
  kPositionEmbedding,  // (Tmax, C)
  kAttnNormWeight,     // (C) GPT-2 ln_1 / Llama input_layernorm
  kAttnNormBias,       // (C) GPT-2 only
  kMlpNormWeight,      // (C) GPT-2 ln_2 / Llama post_attention_layernorm / Gemma pre_feedforward
  kMlpNormBias,        // (C)
  kFinalNormWeight,    // (C) ln_f / model.norm
  kFinalNormBias,      // (C)
  kQkvWeight,          // GPT-2 (3C, C)
  kQkvBias,            // GPT-2 (3C)
  kQWeight,            // (Hq*D, C)
  kKWeight,            // (Hkv*D, C)
  kVWeight,            // (Hkv*D, C)
  kQBias,
  kKBias,
  kVBias,
  kAttnOutWeight,  // (C, Hq*D)
  kAttnOutBias,    // (C)
  kMlpUpWeight,    // GPT-2 c_fc (4C, C); Llama up_proj (F, C)
  kMlpUpBias,
  kMlpGateWeight,  // Llama gate_proj (F, C)
  kMlpGateBias,
  kMlpDownWeight,  // GPT-2 mlp.c_proj (C, 4C); Llama down_proj (C, F)
  kMlpDownBias,
  kLmHead,              // untied (V, C)
  kQNormWeight,         // Qwen3 self_attn.q_norm (D): RMSNorm over each query head
  kKNormWeight,         // Qwen3 self_attn.k_norm (D): RMSNorm over each key head
  kPostAttnNormWeight,  // Gemma 3 post_attention_layernorm (C): over the attention output
  kPostMlpNormWeight,   // Gemma 3 post_feedforward_layernorm (C): over the MLP output
};

// True for the matrices (the GEMM weights, the untied LM head) and the embedding tables: the
// parameters of ≥ 2 dims; false for the biases and the norm weights.
bool is_matrix_or_embedding(ParamKind kind);
// Weight decay applies to matrices and embeddings (is_matrix_or_embedding), never to biases or
// norm weights (the HF Trainer's grouping, which is what DeepSpeed receives).
bool decays(ParamKind kind);
// True for the output projections that GPT-2 initialises with std 0.02 / sqrt(2 * n_layer).
bool is_residual_projection(ParamKind kind);

struct ParamSpec {
  std::string name;  // HF name, e.g. "transformer.h.0.attn.c_attn.weight"
  ParamKind kind = ParamKind::kTokenEmbedding;
  Shape shape;                 // our layout: nn.Linear (out, in) for every matrix
  int64_t offset = 0;          // element offset inside the unit's flat buffer
  bool hf_transposed = false;  // HF stores it transposed (GPT-2 Conv1D [in, out])
  // Phi-3: HF stores it as rows [hf_row_offset, hf_row_offset + shape[0]) of the fused matrix
  // hf_fused (qkv_proj: q, k, v; gate_up_proj: gate, up) of hf_fused_rows rows; the parts of one
  // fused matrix follow each other in the unit, so the unit holds it whole, in HF's order. Empty:
  // the HF tensor is `name`.
  std::string hf_fused;
  int64_t hf_row_offset = 0;
  int64_t hf_fused_rows = 0;
  int64_t numel() const { return shape.numel(); }
};

enum class UnitKind { kEmbedding, kBlock, kFinal };

struct UnitSpec {
  std::string name;  // "embedding", "h.3", "final"
  UnitKind kind;
  int block_index = -1;  // for kBlock
  std::vector<ParamSpec> params;
  int64_t numel = 0;  // sum of the params' numel (unpadded)

  const ParamSpec& param(ParamKind kind) const;
  const ParamSpec* find(ParamKind kind) const;
};

class ModelLayout {
 public:
  explicit ModelLayout(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  const UnitSpec& unit(int u) const { return units_[static_cast<size_t>(u)]; }
  const std::vector<UnitSpec>& units() const { return units_; }
  int embedding_unit() const { return 0; }
  int block_unit(int layer) const { return 1 + layer; }
  int final_unit() const { return num_units() - 1; }
  int64_t total_numel() const;
  // Finds a parameter by its HF name (a fused HF matrix: its first part); null when absent.
  const ParamSpec* find_param(const std::string& hf_name, int* unit_out = nullptr) const;

 private:
  ModelConfig config_;
  std::vector<UnitSpec> units_;
};

}  // namespace zero::model
