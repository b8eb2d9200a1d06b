// Text generation with a trained model: a sampling loop (temperature, top-k, top-p) over a
// key/value cache (model::CachedDecoder: KvDecoder for the CPU model, CudaKvDecoder on the GPU), so
// each new token costs one token's forward; or, for any model::Model (generate_recompute), over a
// whole forward per token.
// When the context reaches its limit, the oldest half is dropped and the newest half re-read (one
// prefill per limit/2 tokens); both loops keep the same window and sample with the same code, so
// with the same options they produce the same tokens up to float ties. ZeRO-Inference
// (partitioned, offloaded forward) builds on the same ParamAccess seam.
#pragma once

#include <cstdint>
#include <vector>

#include "model/cached_decoder.h"
#include "model/model.h"
#include "model/param_access.h"

namespace zero::runtime {

struct SamplingOptions {
  int64_t max_new_tokens = 100;
  double temperature = 1.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = whole vocabulary
  // Nucleus sampling (HF's TopPLogitsWarper, applied after temperature and top-k): keep the
  // smallest set of most likely tokens whose probability sums to at least top_p. 1 = off.
  double top_p = 1.0;
  uint64_t seed = 1;
  // Positions kept in the cache; 0 = max_position_embeddings, at most 4096 (long-context models
  // would otherwise allocate a cache for 128k positions).
  int64_t context_limit = 0;
  // Generation ends when one of these is sampled (the model's EOS ids); it is not appended.
  std::vector<int32_t> stop_tokens;
};

// The distribution a token is sampled from (temperature > 0): softmax(logits / temperature),
// restricted to the top_k most likely, then to the top_p nucleus, renormalised. `probs` gets V
// entries summing to 1 (zeros for the tokens cut). `order` is scratch space.
void sampling_distribution(const float* logits, int64_t V, const SamplingOptions& options,
                           std::vector<double>* probs, std::vector<int64_t>* order);

// Appends up to max_new_tokens sampled tokens to `tokens` (which holds the prompt, at least 1
// token), stopping early at a stop token. `on_token` (may be null) is called with each new token
// as it is produced. Returns true when a stop token ended the generation.
bool generate(model::Model& model, model::ParamAccess& params, std::vector<int32_t>& tokens,
              const SamplingOptions& options, void (*on_token)(int32_t token, void* ctx) = nullptr,
              void* ctx = nullptr);

// The positions generation keeps: options.context_limit, else max_position_embeddings, at most
// 4096; never past max_position_embeddings.
int64_t generation_context_limit(const model::ModelConfig& config, const SamplingOptions& options);

// Positions a decoder for generate_cached needs: the context limit, or fewer when the prompt and
// the new tokens fit in less.
int64_t generation_cache_capacity(const model::ModelConfig& config, int64_t prompt_tokens,
                                  const SamplingOptions& options);

// generate() over `decoder` (of a `config` model, emptied first): the same window, sampling, RNG
// and stopping. REQUIRES: decoder.capacity() >= generation_cache_capacity(config, tokens.size(),
// options).
bool generate_cached(model::CachedDecoder& decoder, const model::ModelConfig& config,
                     model::ParamAccess& params, std::vector<int32_t>& tokens,
                     const SamplingOptions& options,
                     void (*on_token)(int32_t token, void* ctx) = nullptr, void* ctx = nullptr);

// generate() without a key/value cache, for any model::Model: every new token is one forward over
// the tokens generate() would hold in its cache (the newest ones, up to the context limit), taking
// the last position's logits to the host. Costs a whole forward of up to `context_limit` positions
// per token (`zero generate --device cuda --no_kv_cache`, the baseline the cache is timed
// against). Same sampling, RNG and stopping as generate().
bool generate_recompute(model::Model& model, model::ParamAccess& params,
                        std::vector<int32_t>& tokens, const SamplingOptions& options,
                        void (*on_token)(int32_t token, void* ctx) = nullptr, void* ctx = nullptr);

}  // namespace zero::runtime
