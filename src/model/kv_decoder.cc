// Incremental decoding with a key/value cache (see kv_decoder.h).
// Legend: n new rows, C hidden, F intermediate, Hq / Hkv heads, D head dim, V vocabulary.
#include "model/kv_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/rope/rope.h"

namespace zero::model {

namespace k = kernels::cpu;

namespace {
void resize(std::vector<float>& v, int64_t n) { v.resize(static_cast<size_t>(n)); }
}  // namespace

KvDecoder::KvDecoder(const ModelLayout& layout, int64_t capacity)
    : layout_(layout), capacity_(capacity) {
  const ModelConfig& c = layout.config();
  ZERO_CHECK(capacity >= 1, "KvDecoder capacity ", capacity);
  ZERO_CHECK(c.arch != Arch::kGpt2 || capacity <= c.max_position_embeddings, "KvDecoder capacity ",
             capacity, " exceeds max_position_embeddings ", c.max_position_embeddings);

  const int64_t D = c.head_dim();
  kv_ = c.num_kv_heads * D;
  k_cache_.assign(static_cast<size_t>(c.num_layers),
                  std::vector<float>(static_cast<size_t>(capacity * kv_)));
  v_cache_.assign(static_cast<size_t>(c.num_layers),
                  std::vector<float>(static_cast<size_t>(capacity * kv_)));
  if (c.arch == Arch::kLlama) {
    resize(rope_cos_, capacity * (D / 2));
    resize(rope_sin_, capacity * (D / 2));
    // "dynamic" RoPE changes its frequencies as HF's cache grows past max_position_embeddings;
    // within it the tables are the default ones, so the capacity is capped there.
    ZERO_CHECK(c.rope_scaling.type != "dynamic" || capacity <= c.max_position_embeddings,
               "KvDecoder capacity ", capacity, " exceeds max_position_embeddings ",
               c.max_position_embeddings, " with dynamic RoPE (not supported)");
    k::rope_tables(rope_cos_.data(), rope_sin_.data(),
                   k::rope_inv_freq(D, c.rope_theta, c.rope_scaling, capacity), capacity,
                   c.rope_scaling.attention_factor);
    if (c.local_rope_theta > 0) {  // Gemma 3's sliding layers
      resize(rope_cos_local_, capacity * (D / 2));
      resize(rope_sin_local_, capacity * (D / 2));
      k::rope_tables(rope_cos_local_.data(), rope_sin_local_.data(),
                     k::rope_inv_freq(D, c.local_rope_theta, c.local_rope_scaling, capacity),
                     capacity, c.local_rope_scaling.attention_factor);
    }
  }
}

// Attention of the new rows over the cache: their keys and values join it at positions
// [length_, length_ + n), then each row attends over every position up to its own.
class KvDecoder::CachedAttention final : public BlockAttention {
 public:
  CachedAttention(KvDecoder& decoder, int64_t n) : decoder_(decoder), n_(n) {}
  void forward(int layer, const float* q, const float* k, const float* v, float* y) override {
    const size_t bytes = static_cast<size_t>(n_ * decoder_.kv_) * sizeof(float);
    std::memcpy(decoder_.k_rows(layer), k, bytes);
    std::memcpy(decoder_.v_rows(layer), v, bytes);
    decoder_.attend(layer, q, y, n_);
  }

 private:
  KvDecoder& decoder_;
  int64_t n_;
};

BlockBuffers KvDecoder::block_buffers(int64_t n) {
  const ModelConfig& c = layout_.config();
  const int64_t C = c.hidden_size, F = c.intermediate_size, HqD = c.num_heads * c.head_dim();
  const bool gpt2 = c.arch == Arch::kGpt2;
  auto rows = [](std::vector<float>& v, int64_t numel) {
    resize(v, numel);
    return v.data();
  };
  // norm1 and norm2 (and their statistics) share storage: norm1 is dead once q, k, v exist.
  float* norm = rows(norm_, n * C);
  float* mean = rows(mean_, n);
  float* rstd = rows(rstd_, n);
  return {.norm1 = norm,
          .mean1 = mean,
          .rstd1 = rstd,
          .qkv = gpt2 ? rows(qkv_, n * 3 * C) : nullptr,
          .q = rows(q_, n * HqD),
          .k = rows(k_, n * kv_),
          .v = rows(v_, n * kv_),
          .q_rot = gpt2 ? nullptr : rows(q_rot_, n * HqD),
          .k_rot = gpt2 ? nullptr : rows(k_rot_, n * kv_),
          .q_rstd = c.qk_norm ? rows(q_rstd_, n * c.num_heads) : nullptr,
          .k_rstd = c.qk_norm ? rows(k_rstd_, n * c.num_kv_heads) : nullptr,
          .attn_y = rows(y_, n * HqD),
          .x2 = rows(x2_, n * C),
          .norm2 = norm,
          .mean2 = mean,
          .rstd2 = rstd,
          .gate = gpt2 ? nullptr : rows(gate_, n * F),
          .up = rows(up_, n * F),
          .act = rows(act_, n * F),
          .attn_out = c.post_norms ? rows(attn_out_, n * C) : nullptr,
          .rstd_post_attn = c.post_norms ? rows(rstd_post_, n) : nullptr,
          .mlp_out = c.post_norms ? rows(mlp_out_, n * C) : nullptr,
          .rstd_post_mlp = c.post_norms ? rows(rstd_post_, n) : nullptr,
          .gate_act = c.post_norms ? rows(gate_act_, n * F) : nullptr};
}

void KvDecoder::append(ParamAccess& params, const int32_t* tokens, int64_t n, float* logits) {
  const ModelConfig& c = layout_.config();
  ZERO_CHECK(n >= 1 && length_ + n <= capacity_, "KvDecoder: ", n, " tokens at position ", length_,
             " exceed the capacity ", capacity_);
  const int64_t C = c.hidden_size;
  // One sequence of the n new rows, at positions [length_, length_ + n); fp32 GEMMs.
  const ForwardContext ctx{
      .config = c,
      .B = 1,
      .T = n,
      .position = length_,
      .rope_cos = rope_cos_.data(),
      .rope_sin = rope_sin_.data(),
      .rope_cos_local = rope_cos_local_.empty() ? nullptr : rope_cos_local_.data(),
      .rope_sin_local = rope_sin_local_.empty() ? nullptr : rope_sin_local_.data()};
  std::vector<float> x(static_cast<size_t>(n * C));

  const int emb = layout_.embedding_unit();
  {
    AcquiredUnit w(params, emb, widened_embedding_);
    embedding_forward(ctx, layout_.unit(emb), w, tokens, x.data());
  }

  // Each block in place: x becomes its output.
  const BlockBuffers b = block_buffers(n);
  CachedAttention attention(*this, n);
  for (int l = 0; l < c.num_layers; ++l) {
    const int unit = layout_.block_unit(l);
    AcquiredUnit w(params, unit, widened_unit_);
    block_forward(ctx, layout_.unit(unit), w, x.data(), x.data(), b, attention);
  }

  // Final norm and head, for the last row only (the tied head reads the embedding unit).
  const float* last = x.data() + (n - 1) * C;
  const int fin = layout_.final_unit();
  const UnitSpec& fu = layout_.unit(fin);
  AcquiredUnit fw(params, fin, widened_unit_);
  const FinalBuffers fb{norm_.data(), mean_.data(), rstd_.data()};
  if (const ParamSpec* lm = fu.find(ParamKind::kLmHead)) {
    final_forward(ctx, fu, fw, fw + lm->offset, last, 1, fb, logits);
  } else {
    AcquiredUnit ew(params, emb, widened_embedding_);
    const float* head = ew + layout_.unit(emb).param(ParamKind::kTokenEmbedding).offset;
    final_forward(ctx, fu, fw, head, last, 1, fb, logits);
  }
  if (c.final_logit_softcapping > 0) {  // Gemma 2
    const float cap = static_cast<float>(c.final_logit_softcapping);
    for (int64_t v = 0; v < c.vocab_size; ++v) logits[v] = cap * std::tanh(logits[v] / cap);
  }
  length_ += n;
}

void KvDecoder::attend(int layer, const float* q, float* y, int64_t n) const {
  const ModelConfig& c = layout_.config();
  const int64_t Hq = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim(), group = Hq / Hkv;
  const float* K = k_cache_[static_cast<size_t>(layer)].data();
  const float* Vc = v_cache_[static_cast<size_t>(layer)].data();
  const float scale = 1.0f / (std::sqrt(static_cast<float>(D)) *
                              static_cast<float>(c.attention_score_divisor(layer)));
  const int64_t window = c.attention_window(layer);
  const float cap = static_cast<float>(c.attn_logit_softcapping);  // Gemma 2; 0: none
#pragma omp parallel
  {
    std::vector<float> p(static_cast<size_t>(length_ + n));
#pragma omp for collapse(2) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t keys = length_ + i + 1;  // causal: positions [0, length_ + i]
        // Sliding window: only the last `window` of them (HF Mistral / Qwen2).
        const int64_t first = window > 0 ? std::max<int64_t>(0, keys - window) : 0;
        const int64_t kvh = h / group;
        const float* qi = q + (i * Hq + h) * D;
        float max_score = -INFINITY;
        for (int64_t j = first; j < keys; ++j) {
          const float* kj = K + j * kv_ + kvh * D;
          float s = 0.0f;
          for (int64_t d = 0; d < D; ++d) s += qi[d] * kj[d];
          s *= scale;
          if (cap > 0) s = cap * std::tanh(s / cap);
          p[static_cast<size_t>(j)] = s;
          max_score = std::max(max_score, s);
        }
        float sum = 0.0f;
        for (int64_t j = first; j < keys; ++j) {
          const float e = std::exp(p[static_cast<size_t>(j)] - max_score);
          p[static_cast<size_t>(j)] = e;
          sum += e;
        }
        const float inv = 1.0f / sum;
        float* yi = y + (i * Hq + h) * D;
        std::fill(yi, yi + D, 0.0f);
        for (int64_t j = first; j < keys; ++j) {
          const float pj = p[static_cast<size_t>(j)] * inv;
          const float* vj = Vc + j * kv_ + kvh * D;
          for (int64_t d = 0; d < D; ++d) yi[d] += pj * vj[d];
        }
      }
    }
  }
}

}  // namespace zero::model
