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

}  // namespace zero::model::config_json
