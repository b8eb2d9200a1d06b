// The sampling loop over model::KvDecoder, or over whole forwards (see generate.h).
#include "runtime/generate.h"

#include <algorithm>
#include <cmath>
#include <functional>
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

namespace {

// Computes the logits (V floats, host) of the last of `n` tokens `window` (the context the model
// holds). `extends` is true when the window is the previous one plus its last token (a cache only
// reads that token), false when it is read afresh (the prompt, or after the oldest half was
// dropped).
using ReadWindowFn =
    std::function<void(const int32_t* window, int64_t n, bool extends, float* logits)>;

// The sampling loop both ways of computing logits share: the window, the RNG and the stopping.
bool sample_tokens(int64_t V, int64_t limit, std::vector<int32_t>& tokens,
                   const SamplingOptions& options, void (*on_token)(int32_t, void*), void* ctx,
                   const ReadWindowFn& read_window) {
  std::mt19937_64 rng(options.seed);
  std::vector<double> probs(static_cast<size_t>(V));
  std::vector<int64_t> order(static_cast<size_t>(V));
  std::vector<float> logits(static_cast<size_t>(V));
  // The newest `n` tokens: the context the logits are computed over.
  int64_t window = 0;
  auto read_newest = [&](int64_t n, bool extends) {
    window = std::min<int64_t>(n, static_cast<int64_t>(tokens.size()));
    read_window(tokens.data() + tokens.size() - static_cast<size_t>(window), window, extends,
                logits.data());
  };
  read_newest(limit, /*extends=*/false);
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    int32_t next = 0;
    if (options.temperature <= 0.0) {
      next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    } else {
      sampling_distribution(logits.data(), V, options, &probs, &order);
      std::discrete_distribution<int64_t> dist(probs.begin(), probs.end());
      next = static_cast<int32_t>(dist(rng));
    }
    if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), next) !=
        options.stop_tokens.end()) {
      return true;
    }
    tokens.push_back(next);
    if (on_token) on_token(next, ctx);
    if (i + 1 == options.max_new_tokens) break;
    if (window < limit) {
      read_newest(window + 1, /*extends=*/true);
    } else {
      read_newest(std::max<int64_t>(1, limit / 2), /*extends=*/false);
    }
  }
  return false;
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

bool generate_cached(model::CachedDecoder& decoder, const model::ModelConfig& c,
                     model::ParamAccess& params, std::vector<int32_t>& tokens,
                     const SamplingOptions& options, void (*on_token)(int32_t, void*), void* ctx) {
  if (options.max_new_tokens <= 0 || tokens.empty()) return false;
  ZERO_CHECK(decoder.capacity() >=
                 generation_cache_capacity(c, static_cast<int64_t>(tokens.size()), options),
             "a key/value cache of ", decoder.capacity(), " positions is too small");
  decoder.reset();
  return sample_tokens(c.vocab_size, generation_context_limit(c, options), tokens, options,
                       on_token, ctx,
                       [&](const int32_t* window, int64_t n, bool extends, float* logits) {
                         if (extends) {
                           decoder.append(params, window + n - 1, 1, logits);
                         } else {
                           decoder.reset();
                           decoder.append(params, window, n, logits);
                         }
                       });
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
  return sample_tokens(c.vocab_size, generation_context_limit(c, options), tokens, options,
                       on_token, ctx, [&](const int32_t* window, int64_t n, bool, float* logits) {
                         model.forward(params, window, /*targets=*/nullptr, 1, n);
                         model.logits_at(0, n - 1, logits);
                       });
}

}  // namespace zero::runtime
