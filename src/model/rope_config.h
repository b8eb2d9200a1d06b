// The RoPE keys of an HF config.json (internal to the config readers): the 4.x top-level
// rope_theta + rope_scaling and the transformers-5 rope_parameters object, read into a ModelConfig
// and written back.
#pragma once

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "kernels/rope/rope.h"
#include "model/model_config.h"

namespace zero::model::config_json {

class Reader;

// transformers' get_mscale: yarn's attention factor for `scale` (m = 1 without attention_factor
// or the mscale pair).
double yarn_mscale(double scale, double m);

// Reads both layouts into c.rope_theta and c.rope_scaling; present together, they must agree.
// Every key of a RoPE object must be known, and every rope_type implemented (errors name the key).
// REQUIRES: c.max_position_embeddings is read.
Status parse_rope(const nlohmann::json& j, const Reader& r, ModelConfig& c);

// The RoPE object for `s` (without rope_theta): the keys transformers reads for its type. yarn's
// optional keys are written when `input` (the rope object read, or null) had them or when their
// value is not the one transformers derives without them, so a save keeps the keys it was given.
nlohmann::json rope_object(const kernels::cpu::RopeScaling& s, const nlohmann::json* input);

// Gemma 3: the global layers' RoPE into c.rope_theta / c.rope_scaling and the sliding layers' into
// c.local_rope_theta / c.local_rope_scaling, from 4.x rope_theta (default 1e6), rope_scaling (the
// global layers') and rope_local_base_freq (default 1e4), or transformers-5 rope_parameters
// {"full_attention": {...}, "sliding_attention": {...}}.
Status parse_gemma3_rope(const nlohmann::json& j, const Reader& r, ModelConfig& c);
// Writes them back into `j` in the layout read (v5: rope_parameters).
void write_gemma3_rope(const ModelConfig& c, nlohmann::json& j, bool v5);

}  // namespace zero::model::config_json
