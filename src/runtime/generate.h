// Text generation with a trained model: a simple sampling loop (temperature, top-k) that re-runs
// the forward pass over the context window for each new token. Good enough for small models and
// demos; ZeRO-Inference (partitioned, offloaded forward) builds on the same ParamAccess seam.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.h"
#include "model/param_access.h"

namespace zero::runtime {

struct SamplingOptions {
  int64_t max_new_tokens = 100;
  double temperature = 1.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = whole vocabulary
  uint64_t seed = 1;
  int64_t context_limit = 0;  // 0 = the model's max_position_embeddings
};

// Appends up to max_new_tokens sampled tokens to `tokens` (which holds the prompt, at least 1
// token). `on_token` (may be null) is called with each new token as it is produced.
void generate(model::Model& model, model::ParamAccess& params, std::vector<int32_t>& tokens,
              const SamplingOptions& options, void (*on_token)(int32_t token, void* ctx) = nullptr,
              void* ctx = nullptr);

}  // namespace zero::runtime
