// The sampling loop over model::CachedDecoder's slots, or over whole forwards (see generate.h).
#include "runtime/generate.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <random>

#include "core/check.h"
#include "model/kv_decoder.h"

namespace zero::runtime {

void sampling_distribution(const float* logits, int64_t V, const SamplingOptions& options,
                           std::vector<double>* probs_out, std::vector<int64_t>* order_out) {
  std::vector<double>& probs = *probs_out;
  std::vector<int64_t>& order = *order_out;
  probs.resize(static_cast<size_t>(V));
  order.resize(static_cast<size_t>(V));
  const double max_logit = *std::max_element(logits, logits + V);
  for (int64_t v = 0; v < V; ++v) {
    probs[static_cast<size_t>(v)] = std::exp((logits[v] - max_logit) / options.temperature);
  }
  auto more_likely = [&](int64_t a, int64_t b) {
    return probs[static_cast<size_t>(a)] > probs[static_cast<size_t>(b)];
  };
  for (int64_t v = 0; v < V; ++v) order[static_cast<size_t>(v)] = v;
  int64_t kept = V;  // the first `kept` of `order` are the candidates
  if (options.top_k > 0 && options.top_k < V) {
    std::nth_element(order.begin(), order.begin() + options.top_k, order.end(), more_likely);
    for (auto it = order.begin() + options.top_k; it != order.end(); ++it) probs[*it] = 0.0;
    kept = options.top_k;
  }
  double total = 0.0;
  for (int64_t v = 0; v < V; ++v) total += probs[static_cast<size_t>(v)];
  if (options.top_p < 1.0) {
    // Most likely first; the nucleus ends at the first token where the running sum reaches top_p
    // (at least one token is kept, as HF's min_tokens_to_keep = 1).
    std::sort(order.begin(), order.begin() + kept, more_likely);
    double cumulative = 0.0, nucleus = 0.0;
    int64_t i = 0;
    while (i < kept) {
      cumulative += probs[static_cast<size_t>(order[static_cast<size_t>(i)])] / total;
      ++i;
      if (cumulative >= options.top_p) break;
    }
    for (int64_t j = i; j < kept; ++j)
      probs[static_cast<size_t>(order[static_cast<size_t>(j)])] = 0;
    for (int64_t j = 0; j < i; ++j)
      nucleus += probs[static_cast<size_t>(order[static_cast<size_t>(j)])];
    total = nucleus;
  }
  for (double& p : probs) p /= total;
}

void apply_repetition_penalty(float* logits, int64_t V, std::span<const int32_t> context,
                              double penalty) {
  std::vector<bool> seen(static_cast<size_t>(V), false);
  const float p = static_cast<float>(penalty);
  for (int32_t id : context) {
    if (id < 0 || id >= V || seen[static_cast<size_t>(id)]) continue;
    seen[static_cast<size_t>(id)] = true;
    logits[id] = logits[id] < 0 ? logits[id] * p : logits[id] / p;
  }
}

uint64_t sequence_seed(uint64_t seed, int64_t index) {
  return seed + static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ull;
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos: return "eos";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
  }
  return "?";
}

namespace {

// One running sequence's context for the next forward: its newest `n` tokens (the window the model
// holds), in its `slot`. `extends` is true when the window is the previous one plus its last token
// (a cache only reads that token), false when it is read afresh (the prompt, or after the oldest
// half was dropped).
struct WindowRead {
  int64_t slot = 0;
  const int32_t* window = nullptr;
  int64_t n = 0;
  bool extends = false;
};
// Computes the logits of the last token of each read's window into row r of `logits`
// (reads.size(), V), host memory.
using ReadWindowsFn = std::function<void(std::span<const WindowRead> reads, float* logits)>;

// A sequence between its admission and its end.
struct Running {
  int64_t seq = 0;     // index into the batch
  int64_t slot = 0;    // of the cache
  int64_t limit = 0;   // positions its context keeps
  int64_t window = 0;  // newest tokens in its context
  int64_t generated = 0;
  std::mt19937_64 rng;
};

// The next token of `s` from its logits row (V, modified by the repetition penalty).
int32_t next_token(float* logits, int64_t V, const BatchSequence& s, std::mt19937_64& rng,
                   std::vector<double>* probs, std::vector<int64_t>* order) {
  const SamplingOptions& o = s.options;
  if (o.repetition_penalty != 1.0) {
    apply_repetition_penalty(logits, V, s.tokens, o.repetition_penalty);
  }
  if (o.temperature <= 0.0) {
    return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  }
  sampling_distribution(logits, V, o, probs, order);
  std::discrete_distribution<int64_t> dist(probs->begin(), probs->end());
  return static_cast<int32_t>(dist(rng));
}

// The read that follows a new token: the window plus it, or past the limit the newest half afresh.
WindowRead next_read(Running& r, const std::vector<int32_t>& tokens) {
  const bool extends = r.window < r.limit;
  r.window = extends ? r.window + 1 : std::max<int64_t>(1, r.limit / 2);
  return {.slot = r.slot,
          .window = tokens.data() + tokens.size() - static_cast<size_t>(r.window),
          .n = r.window,
          .extends = extends};
}

// The sampling loop every way of computing logits shares: admission into free slots, the windows,
// the RNG streams and the stopping. One `read` per step for every running sequence.
Status sample_batch(const model::ModelConfig& c, int64_t slots, std::vector<BatchSequence>& seqs,
                    BatchObserver& observer, const ReadWindowsFn& read) {
  const int64_t V = c.vocab_size;
  TokenSync* sync = seqs.empty() ? nullptr : seqs[0].options.sync;
  std::vector<int32_t> nexts;       // nexts[k] is running[k]'s new token
  std::vector<int64_t> free_slots;  // taken from the back: slot 0 first
  for (int64_t s = slots - 1; s >= 0; --s) free_slots.push_back(s);
  std::vector<Running> running, still_running;
  std::vector<WindowRead> reads;  // reads[k] is running[k]'s
  std::vector<float> logits;
  std::vector<double> probs(static_cast<size_t>(V));
  std::vector<int64_t> order(static_cast<size_t>(V));
  size_t waiting = 0;  // the next sequence to admit
  while (true) {
    while (!free_slots.empty() && waiting < seqs.size()) {
      const int64_t i = static_cast<int64_t>(waiting++);
      BatchSequence& s = seqs[static_cast<size_t>(i)];
      if (s.options.max_new_tokens <= 0 || s.tokens.empty()) {
        ZERO_RETURN_IF_ERROR(observer.on_finish(i, FinishReason::kLength));
        continue;
      }
      Running r{.seq = i,
                .slot = free_slots.back(),
                .limit = generation_context_limit(c, s.options),
                .rng = std::mt19937_64(s.options.seed)};
      free_slots.pop_back();
      // The prompt's newest `limit` tokens.
      r.window = std::min<int64_t>(r.limit, static_cast<int64_t>(s.tokens.size()));
      reads.push_back({.slot = r.slot,
                       .window = s.tokens.data() + s.tokens.size() - static_cast<size_t>(r.window),
                       .n = r.window});
      running.push_back(std::move(r));
    }
    if (running.empty()) return ok_status();
    logits.resize(reads.size() * static_cast<size_t>(V));
    read(reads, logits.data());
    reads.clear();
    still_running.clear();
    nexts.clear();
    for (size_t k = 0; k < running.size(); ++k) {
      nexts.push_back(next_token(logits.data() + k * static_cast<size_t>(V), V,
                                 seqs[static_cast<size_t>(running[k].seq)], running[k].rng, &probs,
                                 &order));
    }
    if (sync != nullptr) ZERO_RETURN_IF_ERROR(sync->agree(nexts));
    for (size_t k = 0; k < running.size(); ++k) {
      Running& r = running[k];
      BatchSequence& s = seqs[static_cast<size_t>(r.seq)];
      const int32_t next = nexts[k];
      std::optional<FinishReason> done;
      const std::vector<int32_t>& stop = s.options.stop_tokens;
      if (std::find(stop.begin(), stop.end(), next) != stop.end()) {
        done = FinishReason::kEos;
      } else {
        s.tokens.push_back(next);
        ++r.generated;
        if (observer.on_token(r.seq, next)) {
          done = FinishReason::kStop;
        } else if (r.generated == s.options.max_new_tokens) {
          done = FinishReason::kLength;
        }
      }
      if (done) {
        free_slots.push_back(r.slot);
        ZERO_RETURN_IF_ERROR(observer.on_finish(r.seq, *done));
        continue;
      }
      reads.push_back(next_read(r, s.tokens));
      still_running.push_back(std::move(r));
    }
    std::swap(running, still_running);
  }
}

// A single prompt as a batch of one: on_token forwarded, the finish reason kept.
class SingleObserver final : public BatchObserver {
 public:
  SingleObserver(void (*on_token)(int32_t, void*), void* ctx) : on_token_(on_token), ctx_(ctx) {}
  bool on_token(int64_t, int32_t token) override {
    if (on_token_) on_token_(token, ctx_);
    return false;
  }
  Status on_finish(int64_t, FinishReason reason) override {
    reason_ = reason;
    return ok_status();
  }
  bool stopped() const { return reason_ == FinishReason::kEos; }

 private:
  void (*on_token_)(int32_t, void*);
  void* ctx_;
  FinishReason reason_ = FinishReason::kLength;
};

// Runs `tokens` as a batch of one through `read`; true when a stop token ended it.
bool sample_one(const model::ModelConfig& c, std::vector<int32_t>& tokens,
                const SamplingOptions& options, void (*on_token)(int32_t, void*), void* ctx,
                const ReadWindowsFn& read) {
  std::vector<BatchSequence> one(1);
  one[0].tokens = std::move(tokens);
  one[0].options = options;
  SingleObserver observer(on_token, ctx);
  const Status status = sample_batch(c, 1, one, observer, read);
  // The observer never fails; the ranks' agreement fails only with their collectives.
  ZERO_CHECK(status.ok(), status.to_string());
  tokens = std::move(one[0].tokens);
  return observer.stopped();
}

// Reads through a key/value cache: a fresh window resets its slot first.
ReadWindowsFn cached_reads(model::CachedDecoder& decoder, model::ParamAccess& params) {
  return [&decoder, &params](std::span<const WindowRead> reads, float* logits) {
    std::vector<model::SlotTokens> entries;
    entries.reserve(reads.size());
    for (const WindowRead& r : reads) {
      if (r.extends) {
        entries.push_back({.slot = r.slot, .tokens = r.window + r.n - 1, .n = 1});
      } else {
        decoder.reset_slot(r.slot);
        entries.push_back({.slot = r.slot, .tokens = r.window, .n = r.n});
      }
    }
    decoder.append_batch(params, entries, logits);
  };
}

}  // namespace

int64_t generation_context_limit(const model::ModelConfig& c, const SamplingOptions& options) {
  return options.context_limit > 0 ? std::min(options.context_limit, c.max_position_embeddings)
                                   : std::min<int64_t>(c.max_position_embeddings, 4096);
}

int64_t generation_cache_capacity(const model::ModelConfig& c, int64_t prompt_tokens,
                                  const SamplingOptions& options) {
  // The window never holds more than every token there is (the last one sampled is never read).
  return std::max<int64_t>(1,
                           std::min(generation_context_limit(c, options),
                                    prompt_tokens + std::max<int64_t>(0, options.max_new_tokens)));
}

int64_t batch_cache_capacity(const model::ModelConfig& c, const std::vector<BatchSequence>& seqs) {
  int64_t capacity = 1;
  for (const BatchSequence& s : seqs) {
    capacity = std::max(
        capacity, generation_cache_capacity(c, static_cast<int64_t>(s.tokens.size()), s.options));
  }
  return capacity;
}

bool generate_cached(model::CachedDecoder& decoder, const model::ModelConfig& c,
                     model::ParamAccess& params, std::vector<int32_t>& tokens,
                     const SamplingOptions& options, void (*on_token)(int32_t, void*), void* ctx) {
  if (options.max_new_tokens <= 0 || tokens.empty()) return false;
  ZERO_CHECK(decoder.capacity() >=
                 generation_cache_capacity(c, static_cast<int64_t>(tokens.size()), options),
             "a key/value cache of ", decoder.capacity(), " positions is too small");
  decoder.reset();
  return sample_one(c, tokens, options, on_token, ctx, cached_reads(decoder, params));
}

bool generate(model::Model& model, model::ParamAccess& params, std::vector<int32_t>& tokens,
              const SamplingOptions& options, void (*on_token)(int32_t, void*), void* ctx) {
  if (options.max_new_tokens <= 0 || tokens.empty()) return false;
  const model::ModelConfig& c = model.layout().config();
  model::KvDecoder decoder(model.layout(), generation_context_limit(c, options));
  return generate_cached(decoder, c, params, tokens, options, on_token, ctx);
}

bool generate_recompute(model::Model& model, model::ParamAccess& params,
                        std::vector<int32_t>& tokens, const SamplingOptions& options,
                        void (*on_token)(int32_t, void*), void* ctx) {
  if (options.max_new_tokens <= 0 || tokens.empty()) return false;
  const model::ModelConfig& c = model.layout().config();
  const int64_t V = c.vocab_size;
  return sample_one(c, tokens, options, on_token, ctx,
                    [&](std::span<const WindowRead> reads, float* logits) {
                      for (size_t r = 0; r < reads.size(); ++r) {
                        model.forward(params, reads[r].window, /*targets=*/nullptr, 1, reads[r].n);
                        model.logits_at(0, reads[r].n - 1, logits + r * static_cast<size_t>(V));
                      }
                    });
}

Status generate_batch_cached(model::CachedDecoder& decoder, const model::ModelConfig& c,
                             model::ParamAccess& params, std::vector<BatchSequence>& seqs,
                             BatchObserver& observer) {
  ZERO_CHECK(decoder.capacity() >= batch_cache_capacity(c, seqs), "a key/value cache of ",
             decoder.capacity(), " positions is too small");
  decoder.reset();
  return sample_batch(c, decoder.slots(), seqs, observer, cached_reads(decoder, params));
}

Status generate_batch(model::Model& model, model::ParamAccess& params,
                      std::vector<BatchSequence>& seqs, int64_t slots, BatchObserver& observer) {
  const model::ModelConfig& c = model.layout().config();
  slots = std::clamp<int64_t>(slots, 1, std::max<int64_t>(1, static_cast<int64_t>(seqs.size())));
  model::KvDecoder decoder(model.layout(), batch_cache_capacity(c, seqs), slots);
  return generate_batch_cached(decoder, c, params, seqs, observer);
}

}  // namespace zero::runtime
