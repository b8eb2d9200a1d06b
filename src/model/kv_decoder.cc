// Incremental decoding with a key/value cache (see kv_decoder.h).
// Legend: n new rows, C hidden, F intermediate, Hq / Hkv heads, D head dim, V vocabulary.
#include "model/kv_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/encoder/encoder.h"
#include "kernels/gelu/gelu.h"
#include "kernels/layernorm/layernorm.h"
#include "kernels/matmul/matmul.h"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/rope/rope.h"
#include "kernels/swiglu/swiglu.h"

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
  }
}

void KvDecoder::append(ParamAccess& params, const int32_t* tokens, int64_t n, float* logits) {
  const ModelConfig& c = layout_.config();
  ZERO_CHECK(n >= 1 && length_ + n <= capacity_, "KvDecoder: ", n, " tokens at position ", length_,
             " exceed the capacity ", capacity_);
  const int64_t C = c.hidden_size, V = c.vocab_size;
  std::vector<float> x(static_cast<size_t>(n * C));

  // Embedding: token rows (+ learned positions for GPT-2).
  const int emb = layout_.embedding_unit();
  {
    const UnitSpec& u = layout_.unit(emb);
    AcquiredUnit w(params, emb, widened_embedding_);
    const ParamSpec* pe = u.find(ParamKind::kPositionEmbedding);
    // The training encoder over one row of n tokens, its position table starting at length_.
    k::encoder_forward(x.data(), tokens, w + u.param(ParamKind::kTokenEmbedding).offset,
                       pe ? w + pe->offset + length_ * C : nullptr, int64_t{1}, n, C, V);
    w.release();
  }

  for (int l = 0; l < c.num_layers; ++l) {
    const int unit = layout_.block_unit(l);
    AcquiredUnit w(params, unit, widened_unit_);
    if (c.arch == Arch::kGpt2) {
      gpt2_block(l, w, x.data(), n);
    } else {
      llama_block(l, w, x.data(), n);
    }
    w.release();
  }

  // Final norm and head, for the last row only.
  const float* last = x.data() + (n - 1) * C;
  const int fin = layout_.final_unit();
  const UnitSpec& fu = layout_.unit(fin);
  AcquiredUnit fw(params, fin, widened_unit_);
  resize(norm_, C);
  resize(mean_, 1);
  resize(rstd_, 1);
  const float eps = static_cast<float>(c.norm_eps);
  if (c.arch == Arch::kGpt2) {
    k::layernorm_forward(norm_.data(), mean_.data(), rstd_.data(), last,
                         fw + fu.param(ParamKind::kFinalNormWeight).offset,
                         fw + fu.param(ParamKind::kFinalNormBias).offset, int64_t{1}, C, eps);
  } else {
    k::rmsnorm_forward(norm_.data(), rstd_.data(), last,
                       fw + fu.param(ParamKind::kFinalNormWeight).offset, int64_t{1}, C, eps);
  }
  if (const ParamSpec* lm = fu.find(ParamKind::kLmHead)) {
    k::matmul_forward(logits, norm_.data(), fw + lm->offset, static_cast<const float*>(nullptr),
                      int64_t{1}, C, V);
  } else {
    AcquiredUnit ew(params, emb, widened_embedding_);
    k::matmul_forward(logits, norm_.data(),
                      ew + layout_.unit(emb).param(ParamKind::kTokenEmbedding).offset,
                      static_cast<const float*>(nullptr), int64_t{1}, C, V);
    ew.release();
  }
  fw.release();
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
          p[static_cast<size_t>(j)] = s * scale;
          max_score = std::max(max_score, s * scale);
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

void KvDecoder::gpt2_block(int layer, const float* w, float* x, int64_t n) {
  const ModelConfig& c = layout_.config();
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  const float eps = static_cast<float>(c.norm_eps);
  const UnitSpec& u = layout_.unit(layout_.block_unit(layer));
  auto W = [&](ParamKind kind) { return w + u.param(kind).offset; };
  resize(norm_, n * C);
  resize(mean_, n);
  resize(rstd_, n);
  resize(qkv_, n * 3 * C);
  resize(q_, n * C);
  resize(y_, n * C);
  resize(x2_, n * C);
  resize(up_, n * F);
  resize(act_, n * F);

  k::layernorm_forward(norm_.data(), mean_.data(), rstd_.data(), x, W(ParamKind::kAttnNormWeight),
                       W(ParamKind::kAttnNormBias), n, C, eps);
  k::matmul_forward(qkv_.data(), norm_.data(), W(ParamKind::kQkvWeight), W(ParamKind::kQkvBias), n,
                    C, 3 * C);
  float* kr = k_rows(layer);
  float* vr = v_rows(layer);
  for (int64_t i = 0; i < n; ++i) {
    const float* row = qkv_.data() + i * 3 * C;
    std::memcpy(q_.data() + i * C, row, static_cast<size_t>(C) * sizeof(float));
    std::memcpy(kr + i * C, row + C, static_cast<size_t>(C) * sizeof(float));
    std::memcpy(vr + i * C, row + 2 * C, static_cast<size_t>(C) * sizeof(float));
  }
  attend(layer, q_.data(), y_.data(), n);
  k::matmul_forward(x2_.data(), y_.data(), W(ParamKind::kAttnOutWeight), W(ParamKind::kAttnOutBias),
                    n, C, C);
  k::add(x2_.data(), x2_.data(), x, n * C);
  k::layernorm_forward(norm_.data(), mean_.data(), rstd_.data(), x2_.data(),
                       W(ParamKind::kMlpNormWeight), W(ParamKind::kMlpNormBias), n, C, eps);
  k::matmul_forward(up_.data(), norm_.data(), W(ParamKind::kMlpUpWeight), W(ParamKind::kMlpUpBias),
                    n, C, F);
  k::gelu_forward(act_.data(), up_.data(), n * F);
  k::matmul_forward(x, act_.data(), W(ParamKind::kMlpDownWeight), W(ParamKind::kMlpDownBias), n, F,
                    C);
  k::add(x, x, x2_.data(), n * C);
}

void KvDecoder::llama_block(int layer, const float* w, float* x, int64_t n) {
  const ModelConfig& c = layout_.config();
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  const int64_t Hq = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim();
  const float eps = static_cast<float>(c.norm_eps);
  const UnitSpec& u = layout_.unit(layout_.block_unit(layer));
  auto W = [&](ParamKind kind) { return w + u.param(kind).offset; };
  auto Wopt = [&](ParamKind kind) -> const float* {
    const ParamSpec* p = u.find(kind);
    return p ? w + p->offset : nullptr;
  };
  resize(norm_, n * C);
  resize(rstd_, n);
  resize(q_, n * Hq * D);
  resize(k_, n * Hkv * D);
  resize(v_, n * Hkv * D);
  resize(qkv_, n * Hq * D);  // the rotated queries
  resize(y_, n * Hq * D);
  resize(x2_, n * C);
  resize(gate_, n * F);
  resize(up_, n * F);
  resize(act_, n * F);

  k::rmsnorm_forward(norm_.data(), rstd_.data(), x, W(ParamKind::kAttnNormWeight), n, C, eps);
  k::matmul_forward(q_.data(), norm_.data(), W(ParamKind::kQWeight), Wopt(ParamKind::kQBias), n, C,
                    Hq * D);
  k::matmul_forward(k_.data(), norm_.data(), W(ParamKind::kKWeight), Wopt(ParamKind::kKBias), n, C,
                    Hkv * D);
  k::matmul_forward(v_rows(layer), norm_.data(), W(ParamKind::kVWeight), Wopt(ParamKind::kVBias), n,
                    C, Hkv * D);
  // RoPE at the absolute positions: the tables from row length_ on.
  const float* cos = rope_cos_.data() + length_ * (D / 2);
  const float* sin = rope_sin_.data() + length_ * (D / 2);
  k::rope_forward(qkv_.data(), q_.data(), cos, sin, int64_t{1}, n, Hq, D);
  k::rope_forward(k_rows(layer), k_.data(), cos, sin, int64_t{1}, n, Hkv, D);
  attend(layer, qkv_.data(), y_.data(), n);
  k::matmul_forward(x2_.data(), y_.data(), W(ParamKind::kAttnOutWeight),
                    Wopt(ParamKind::kAttnOutBias), n, Hq * D, C);
  k::add(x2_.data(), x2_.data(), x, n * C);
  k::rmsnorm_forward(norm_.data(), rstd_.data(), x2_.data(), W(ParamKind::kMlpNormWeight), n, C,
                     eps);
  k::matmul_forward(gate_.data(), norm_.data(), W(ParamKind::kMlpGateWeight),
                    Wopt(ParamKind::kMlpGateBias), n, C, F);
  k::matmul_forward(up_.data(), norm_.data(), W(ParamKind::kMlpUpWeight),
                    Wopt(ParamKind::kMlpUpBias), n, C, F);
  k::swiglu_forward(act_.data(), gate_.data(), up_.data(), n * F);
  k::matmul_forward(x, act_.data(), W(ParamKind::kMlpDownWeight), Wopt(ParamKind::kMlpDownBias), n,
                    F, C);
  k::add(x, x, x2_.data(), n * C);
}

}  // namespace zero::model
