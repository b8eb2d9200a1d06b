// Builds the unit layout of GPT-2 and Llama-family models (Qwen3 included) with HF names.
#include "model/param_layout.h"

#include <fmt/format.h>

#include "core/check.h"

namespace zero::model {

bool is_matrix_or_embedding(ParamKind kind) {
  switch (kind) {
    case ParamKind::kTokenEmbedding:
    case ParamKind::kPositionEmbedding:
    case ParamKind::kQkvWeight:
    case ParamKind::kQWeight:
    case ParamKind::kKWeight:
    case ParamKind::kVWeight:
    case ParamKind::kAttnOutWeight:
    case ParamKind::kMlpUpWeight:
    case ParamKind::kMlpGateWeight:
    case ParamKind::kMlpDownWeight:
    case ParamKind::kLmHead: return true;
    default: return false;
  }
}

bool decays(ParamKind kind) { return is_matrix_or_embedding(kind); }

bool is_residual_projection(ParamKind kind) {
  return kind == ParamKind::kAttnOutWeight || kind == ParamKind::kMlpDownWeight;
}

const ParamSpec* UnitSpec::find(ParamKind kind) const {
  for (const auto& p : params)
    if (p.kind == kind) return &p;
  return nullptr;
}

const ParamSpec& UnitSpec::param(ParamKind kind) const {
  const ParamSpec* p = find(kind);
  ZERO_CHECK(p != nullptr, "unit ", name, " has no parameter of kind ", static_cast<int>(kind));
  return *p;
}

namespace {

UnitSpec make_unit(std::string name, UnitKind kind, int block_index = -1) {
  UnitSpec u;
  u.name = std::move(name);
  u.kind = kind;
  u.block_index = block_index;
  return u;
}

void add(UnitSpec& unit, std::string name, ParamKind kind, Shape shape,
         bool hf_transposed = false) {
  ParamSpec p;
  p.name = std::move(name);
  p.kind = kind;
  p.shape = std::move(shape);
  p.offset = unit.numel;
  p.hf_transposed = hf_transposed;
  unit.numel += p.numel();
  unit.params.push_back(std::move(p));
}

std::vector<UnitSpec> gpt2_units(const ModelConfig& c) {
  const int64_t C = c.hidden_size, V = c.vocab_size, F = c.intermediate_size;
  const std::string pre = "transformer.";
  std::vector<UnitSpec> units;
  UnitSpec emb = make_unit("embedding", UnitKind::kEmbedding);
  add(emb, pre + "wte.weight", ParamKind::kTokenEmbedding, {V, C});
  add(emb, pre + "wpe.weight", ParamKind::kPositionEmbedding, {c.max_position_embeddings, C});
  units.push_back(std::move(emb));
  for (int l = 0; l < c.num_layers; ++l) {
    UnitSpec b = make_unit(fmt::format("h.{}", l), UnitKind::kBlock, l);
    std::string p = fmt::format("{}h.{}.", pre, l);
    add(b, p + "ln_1.weight", ParamKind::kAttnNormWeight, {C});
    add(b, p + "ln_1.bias", ParamKind::kAttnNormBias, {C});
    add(b, p + "attn.c_attn.weight", ParamKind::kQkvWeight, {3 * C, C}, true);
    add(b, p + "attn.c_attn.bias", ParamKind::kQkvBias, {3 * C});
    add(b, p + "attn.c_proj.weight", ParamKind::kAttnOutWeight, {C, C}, true);
    add(b, p + "attn.c_proj.bias", ParamKind::kAttnOutBias, {C});
    add(b, p + "ln_2.weight", ParamKind::kMlpNormWeight, {C});
    add(b, p + "ln_2.bias", ParamKind::kMlpNormBias, {C});
    add(b, p + "mlp.c_fc.weight", ParamKind::kMlpUpWeight, {F, C}, true);
    add(b, p + "mlp.c_fc.bias", ParamKind::kMlpUpBias, {F});
    add(b, p + "mlp.c_proj.weight", ParamKind::kMlpDownWeight, {C, F}, true);
    add(b, p + "mlp.c_proj.bias", ParamKind::kMlpDownBias, {C});
    units.push_back(std::move(b));
  }
  UnitSpec fin = make_unit("final", UnitKind::kFinal);
  add(fin, pre + "ln_f.weight", ParamKind::kFinalNormWeight, {C});
  add(fin, pre + "ln_f.bias", ParamKind::kFinalNormBias, {C});
  if (!c.tie_word_embeddings) add(fin, "lm_head.weight", ParamKind::kLmHead, {V, C});
  units.push_back(std::move(fin));
  return units;
}

// Phi-3 stores q, k, v as one qkv_proj (Hq*D + 2*Hkv*D, C) and gate, up as one gate_up_proj
// (2F, C), in that row order: the same parameters as Llama's, named by the fused matrices.
// REQUIRES: the parts were added consecutively (no biases: Phi-3 has none).
void fuse_phi3(UnitSpec& b, const std::string& prefix, int64_t q_rows, int64_t kv_rows, int64_t F) {
  struct Part {
    ParamKind kind;
    const char* fused;
    const char* suffix;
    int64_t row_offset, fused_rows;
  };
  const Part parts[] = {
      {ParamKind::kQWeight, "self_attn.qkv_proj.weight", ":q", 0, q_rows + 2 * kv_rows},
      {ParamKind::kKWeight, "self_attn.qkv_proj.weight", ":k", q_rows, q_rows + 2 * kv_rows},
      {ParamKind::kVWeight, "self_attn.qkv_proj.weight", ":v", q_rows + kv_rows,
       q_rows + 2 * kv_rows},
      {ParamKind::kMlpGateWeight, "mlp.gate_up_proj.weight", ":gate", 0, 2 * F},
      {ParamKind::kMlpUpWeight, "mlp.gate_up_proj.weight", ":up", F, 2 * F}};
  for (const Part& part : parts) {
    for (ParamSpec& p : b.params) {
      if (p.kind != part.kind) continue;
      p.hf_fused = prefix + part.fused;
      p.name = p.hf_fused + part.suffix;
      p.hf_row_offset = part.row_offset;
      p.hf_fused_rows = part.fused_rows;
    }
  }
  // The fused matrix's rows are contiguous in the unit: each part starts where the previous ended.
  const ParamSpec& q = b.param(ParamKind::kQWeight);
  const ParamSpec& up = b.param(ParamKind::kMlpUpWeight);
  ZERO_CHECK(b.param(ParamKind::kKWeight).offset == q.offset + q.numel() &&
                 b.param(ParamKind::kVWeight).offset ==
                     b.param(ParamKind::kKWeight).offset + b.param(ParamKind::kKWeight).numel() &&
                 up.offset == b.param(ParamKind::kMlpGateWeight).offset +
                                  b.param(ParamKind::kMlpGateWeight).numel(),
             "phi3 fused parameters are not contiguous in ", b.name);
}

std::vector<UnitSpec> llama_units(const ModelConfig& c) {
  const int64_t C = c.hidden_size, V = c.vocab_size, F = c.intermediate_size;
  const int64_t D = c.head_dim(), Hq = c.num_heads, Hkv = c.num_kv_heads;
  const bool out_bias = c.attention_bias && c.model_type != "qwen2";
  std::vector<UnitSpec> units;
  UnitSpec emb = make_unit("embedding", UnitKind::kEmbedding);
  add(emb, "model.embed_tokens.weight", ParamKind::kTokenEmbedding, {V, C});
  units.push_back(std::move(emb));
  for (int l = 0; l < c.num_layers; ++l) {
    UnitSpec b = make_unit(fmt::format("layers.{}", l), UnitKind::kBlock, l);
    std::string p = fmt::format("model.layers.{}.", l);
    add(b, p + "input_layernorm.weight", ParamKind::kAttnNormWeight, {C});
    add(b, p + "self_attn.q_proj.weight", ParamKind::kQWeight, {Hq * D, C});
    add(b, p + "self_attn.k_proj.weight", ParamKind::kKWeight, {Hkv * D, C});
    add(b, p + "self_attn.v_proj.weight", ParamKind::kVWeight, {Hkv * D, C});
    if (c.attention_bias) {
      add(b, p + "self_attn.q_proj.bias", ParamKind::kQBias, {Hq * D});
      add(b, p + "self_attn.k_proj.bias", ParamKind::kKBias, {Hkv * D});
      add(b, p + "self_attn.v_proj.bias", ParamKind::kVBias, {Hkv * D});
    }
    add(b, p + "self_attn.o_proj.weight", ParamKind::kAttnOutWeight, {C, Hq * D});
    if (out_bias) add(b, p + "self_attn.o_proj.bias", ParamKind::kAttnOutBias, {C});
    if (c.qk_norm) {
      add(b, p + "self_attn.q_norm.weight", ParamKind::kQNormWeight, {D});
      add(b, p + "self_attn.k_norm.weight", ParamKind::kKNormWeight, {D});
    }
    if (c.post_norms) {  // Gemma 3: its post_attention_layernorm normalises the attention output
      add(b, p + "post_attention_layernorm.weight", ParamKind::kPostAttnNormWeight, {C});
      add(b, p + "pre_feedforward_layernorm.weight", ParamKind::kMlpNormWeight, {C});
      add(b, p + "post_feedforward_layernorm.weight", ParamKind::kPostMlpNormWeight, {C});
    } else {
      add(b, p + "post_attention_layernorm.weight", ParamKind::kMlpNormWeight, {C});
    }
    add(b, p + "mlp.gate_proj.weight", ParamKind::kMlpGateWeight, {F, C});
    if (c.mlp_bias) add(b, p + "mlp.gate_proj.bias", ParamKind::kMlpGateBias, {F});
    add(b, p + "mlp.up_proj.weight", ParamKind::kMlpUpWeight, {F, C});
    if (c.mlp_bias) add(b, p + "mlp.up_proj.bias", ParamKind::kMlpUpBias, {F});
    add(b, p + "mlp.down_proj.weight", ParamKind::kMlpDownWeight, {C, F});
    if (c.mlp_bias) add(b, p + "mlp.down_proj.bias", ParamKind::kMlpDownBias, {C});
    if (c.model_type == "phi3") fuse_phi3(b, p, Hq * D, Hkv * D, F);
    units.push_back(std::move(b));
  }
  UnitSpec fin = make_unit("final", UnitKind::kFinal);
  add(fin, "model.norm.weight", ParamKind::kFinalNormWeight, {C});
  if (!c.tie_word_embeddings) add(fin, "lm_head.weight", ParamKind::kLmHead, {V, C});
  units.push_back(std::move(fin));
  return units;
}

}  // namespace

ModelLayout::ModelLayout(const ModelConfig& config) : config_(config) {
  units_ = config.arch == Arch::kGpt2 ? gpt2_units(config) : llama_units(config);
}

int64_t ModelLayout::total_numel() const {
  int64_t n = 0;
  for (const auto& u : units_) n += u.numel;
  return n;
}

const ParamSpec* ModelLayout::find_param(const std::string& hf_name, int* unit_out) const {
  for (size_t u = 0; u < units_.size(); ++u) {
    for (const auto& p : units_[u].params) {
      if (p.name == hf_name || (p.hf_row_offset == 0 && p.hf_fused == hf_name)) {
        if (unit_out) *unit_out = static_cast<int>(u);
        return &p;
      }
    }
  }
  return nullptr;
}

}  // namespace zero::model
