// Text generation with a trained model: a sampling loop (repetition penalty, temperature, top-k,
// top-p) over a key/value cache (model::CachedDecoder: KvDecoder for the CPU model, CudaKvDecoder
// on the GPU), so each new token costs one token's forward; or, for any model::Model
// (generate_recompute), over a whole forward per token. The loop runs a batch: every running
// sequence's new rows go through one forward per step (each in its own slot of the cache), and a
// sequence that finishes hands its slot to the next waiting one; one prompt is a batch of one.
// When the context reaches its limit, the oldest half is dropped and the newest half re-read (one
// prefill per limit/2 tokens); both loops keep the same window and sample with the same code, so
// with the same options they produce the same tokens up to float ties. ZeRO-Inference
// (partitioned, offloaded forward) builds on the same ParamAccess seam.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/cached_decoder.h"
#include "model/model.h"
#include "model/param_access.h"

namespace zero::runtime {

// Several ranks generating alike (stage-3 inference): each rank samples from logits that should be
// bitwise its peers', and the forwards' gathers match only while every rank continues with the
// same tokens. The loop hands each step's new tokens (one per running sequence, in order) to
// agree(), which replaces them with the ones every rank keeps (runtime/token_agreement.h: rank
// 0's). An error ends the generation with it.
class TokenSync {
 public:
  virtual Status agree(std::span<int32_t> tokens) = 0;

 protected:
  ~TokenSync() = default;
};

struct SamplingOptions {
  int64_t max_new_tokens = 100;
  double temperature = 1.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = whole vocabulary
  // Nucleus sampling (HF's TopPLogitsWarper, applied after temperature and top-k): keep the
  // smallest set of most likely tokens whose probability sums to at least top_p. 1 = off.
  double top_p = 1.0;
  // HF's RepetitionPenaltyLogitsProcessor, applied first: the logit of every token id already in
  // the sequence (prompt and new tokens) is divided by this when positive, multiplied when
  // negative. 1 = off; > 1 discourages repeats.
  double repetition_penalty = 1.0;
  uint64_t seed = 1;
  // Positions kept in the cache; 0 = max_position_embeddings, at most 4096 (long-context models
  // would otherwise allocate a cache for 128k positions).
  int64_t context_limit = 0;
  // Generation ends when one of these is sampled (the model's EOS ids); it is not appended.
  std::vector<int32_t> stop_tokens;
  // Not owned; null on one rank. A batch agrees through its first sequence's (every sequence of a
  // batch on several ranks carries the same).
  TokenSync* sync = nullptr;
};

// The distribution a token is sampled from (temperature > 0): softmax(logits / temperature),
// restricted to the top_k most likely, then to the top_p nucleus, renormalised. `probs` gets V
// entries summing to 1 (zeros for the tokens cut). `order` is scratch space.
void sampling_distribution(const float* logits, int64_t V, const SamplingOptions& options,
                           std::vector<double>* probs, std::vector<int64_t>* order);

// HF's repetition penalty (SamplingOptions::repetition_penalty) on one row of V logits, in place:
// each distinct id of `context` once.
void apply_repetition_penalty(float* logits, int64_t V, std::span<const int32_t> context,
                              double penalty);

// The seed sequence `index` of a batch samples with: seed + index * 0x9E3779B97F4A7C15 (mod 2^64),
// so each sequence has its own RNG stream whatever the batch size or order, and sequence 0 samples
// as a single prompt run with `seed` does.
uint64_t sequence_seed(uint64_t seed, int64_t index);

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

// Why a sequence of a batch ended.
enum class FinishReason {
  kEos,     // a stop token (the model's EOS ids) was sampled; it is not appended
  kStop,    // the observer stopped it (a stop string in its text)
  kLength,  // max_new_tokens new tokens
};
// "eos", "stop", "length".
const char* finish_reason_name(FinishReason reason);

// One sequence of a batch.
struct BatchSequence {
  std::vector<int32_t> tokens;  // the prompt; generation appends the new tokens
  SamplingOptions options;      // its own (context_limit included; seed: see sequence_seed)
};

// What a batch reports as it goes, sequence by sequence (indices into the batch's vector).
class BatchObserver {
 public:
  // Sequence i got `token`, appended to its tokens. True ends it there (FinishReason::kStop).
  virtual bool on_token(int64_t i, int32_t token) = 0;
  // Sequence i ended, its tokens final (an empty prompt or max_new_tokens <= 0: without a forward).
  // An error ends the batch with it: finished sequences stay reported, running ones are dropped.
  virtual Status on_finish(int64_t i, FinishReason reason) = 0;

 protected:
  ~BatchObserver() = default;
};

// Positions each slot of a decoder for `seqs` needs: the largest generation_cache_capacity.
int64_t batch_cache_capacity(const model::ModelConfig& config,
                             const std::vector<BatchSequence>& seqs);

// Generates every sequence (each as generate() would alone, with its own options and RNG stream)
// over the decoder's slots (emptied first): up to decoder.slots() sequences run at once, one
// append_batch per step for all of them, and each finished one's slot goes to the next in order.
// Returns the first error of observer.on_finish. REQUIRES: decoder.capacity() >=
// batch_cache_capacity(config, seqs).
Status generate_batch_cached(model::CachedDecoder& decoder, const model::ModelConfig& config,
                             model::ParamAccess& params, std::vector<BatchSequence>& seqs,
                             BatchObserver& observer);

// generate_batch_cached on the CPU model: a KvDecoder of `slots` slots (at most seqs.size()).
Status generate_batch(model::Model& model, model::ParamAccess& params,
                      std::vector<BatchSequence>& seqs, int64_t slots, BatchObserver& observer);

}  // namespace zero::runtime
