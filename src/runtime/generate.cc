// Sampling loop over Model::forward.
#include "runtime/generate.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace zero::runtime {

void generate(model::Model& model, model::ParamAccess& params, std::vector<int32_t>& tokens,
              const SamplingOptions& options, void (*on_token)(int32_t, void*), void* ctx) {
  const model::ModelConfig& c = model.layout().config();
  const int64_t limit = options.context_limit > 0
                            ? std::min(options.context_limit, c.max_position_embeddings)
                            : c.max_position_embeddings;
  const int64_t V = c.vocab_size;
  std::mt19937_64 rng(options.seed);
  std::vector<double> probs(static_cast<size_t>(V));
  std::vector<int64_t> order(static_cast<size_t>(V));
  std::vector<float> row(static_cast<size_t>(V));
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(tokens.size()), limit);
    const int32_t* ctx_tokens = tokens.data() + tokens.size() - static_cast<size_t>(T);
    model.forward(params, ctx_tokens, nullptr, 1, T);
    model.logits_at(0, T - 1, row.data());
    const float* logits = row.data();
    int32_t next = 0;
    if (options.temperature <= 0.0) {
      next = static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
    } else {
      double max_logit = *std::max_element(logits, logits + V);
      for (int64_t v = 0; v < V; ++v) {
        probs[static_cast<size_t>(v)] = std::exp((logits[v] - max_logit) / options.temperature);
      }
      if (options.top_k > 0 && options.top_k < V) {
        for (int64_t v = 0; v < V; ++v) order[static_cast<size_t>(v)] = v;
        std::nth_element(order.begin(), order.begin() + options.top_k, order.end(),
                         [&](int64_t a, int64_t b) { return probs[a] > probs[b]; });
        for (auto it = order.begin() + options.top_k; it != order.end(); ++it) probs[*it] = 0.0;
      }
      std::discrete_distribution<int64_t> dist(probs.begin(), probs.end());
      next = static_cast<int32_t>(dist(rng));
    }
    tokens.push_back(next);
    if (on_token) on_token(next, ctx);
  }
}

}  // namespace zero::runtime
