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

KvDecoder::KvDecoder(const ModelLayout& layout, int64_t capacity, int64_t slots)
    : layout_(layout),
      capacity_(capacity),
      lengths_(static_cast<size_t>(slots), 0),
      longrope_(layout.config().rope_scaling, capacity, slots) {
  const ModelConfig& c = layout.config();
  ZERO_CHECK(capacity >= 1 && slots >= 1, "KvDecoder capacity ", capacity, " slots ", slots);
  ZERO_CHECK(c.arch != Arch::kGpt2 || capacity <= c.max_position_embeddings, "KvDecoder capacity ",
             capacity, " exceeds max_position_embeddings ", c.max_position_embeddings);

  const int64_t D = c.head_dim();
  kv_ = c.num_kv_heads * D;
  k_cache_.assign(static_cast<size_t>(c.num_layers),
                  std::vector<float>(static_cast<size_t>(slots * capacity * kv_)));
  v_cache_.assign(static_cast<size_t>(c.num_layers),
                  std::vector<float>(static_cast<size_t>(slots * capacity * kv_)));
  if (c.arch == Arch::kLlama) {
    resize(rope_cos_, capacity * (D / 2));
    resize(rope_sin_, capacity * (D / 2));
    // "dynamic" RoPE changes its frequencies as HF's cache grows past max_position_embeddings;
    // within it the tables are the default ones, so the capacity is capped there.
    ZERO_CHECK(c.rope_scaling.type != "dynamic" || capacity <= c.max_position_embeddings,
               "KvDecoder capacity ", capacity, " exceeds max_position_embeddings ",
               c.max_position_embeddings, " with dynamic RoPE (not supported)");
    // longrope: the short factors here, the long ones beside them (longrope_switch.h); the
    // attention factor is the same for both.
    k::rope_tables(
        rope_cos_.data(), rope_sin_.data(),
        k::rope_inv_freq(D, c.rope_theta, c.rope_scaling, longrope_.short_table_length(capacity)),
        capacity, c.rope_scaling.attention_factor);
    if (longrope_.active()) {
      resize(rope_cos_long_, capacity * (D / 2));
      resize(rope_sin_long_, capacity * (D / 2));
      k::rope_tables(rope_cos_long_.data(), rope_sin_long_.data(),
                     k::rope_inv_freq(D, c.rope_theta, c.rope_scaling, capacity), capacity,
                     c.rope_scaling.attention_factor);
    }
    if (c.local_rope_theta > 0) {  // Gemma 3's sliding layers
      resize(rope_cos_local_, capacity * (D / 2));
      resize(rope_sin_local_, capacity * (D / 2));
      k::rope_tables(rope_cos_local_.data(), rope_sin_local_.data(),
                     k::rope_inv_freq(D, c.local_rope_theta, c.local_rope_scaling, capacity),
                     capacity, c.local_rope_scaling.attention_factor);
    }
  }
}

// Attention of the new rows over the cache: each entry's keys and values join its slot at
// positions [length, length + n), then each row attends over every position of its slot up to its
// own.
class KvDecoder::CachedAttention final : public BlockAttention {
 public:
  CachedAttention(KvDecoder& decoder, std::span<const SlotTokens> entries)
      : decoder_(decoder), entries_(entries) {}
  void forward(int layer, const float* q, const float* k, const float* v, float* y) override {
    const int64_t kv = decoder_.kv_;
    for (size_t e = 0; e < entries_.size(); ++e) {
      const SlotTokens& entry = entries_[e];
      const int64_t first_row = decoder_.entry_row_[e];
      const int64_t at = decoder_.lengths_[static_cast<size_t>(entry.slot)] * kv;
      const size_t bytes = static_cast<size_t>(entry.n * kv) * sizeof(float);
      std::memcpy(decoder_.k_slot(layer, entry.slot) + at, k + first_row * kv, bytes);
      std::memcpy(decoder_.v_slot(layer, entry.slot) + at, v + first_row * kv, bytes);
    }
    decoder_.attend(layer, q, y);
  }

 private:
  KvDecoder& decoder_;
  std::span<const SlotTokens> entries_;
};

int64_t KvDecoder::slot_length(int64_t slot) const {
  ZERO_CHECK(slot >= 0 && slot < slots(), "KvDecoder: slot ", slot, " of ", slots());
  return lengths_[static_cast<size_t>(slot)];
}

void KvDecoder::reset_slot(int64_t slot) {
  ZERO_CHECK(slot >= 0 && slot < slots(), "KvDecoder: slot ", slot, " of ", slots());
  lengths_[static_cast<size_t>(slot)] = 0;
}

void KvDecoder::gather_rope(const std::vector<float>& table, const std::vector<float>& long_table,
                            std::vector<float>* rows) const {
  const int64_t half = layout_.config().head_dim() / 2;
  const int64_t N = static_cast<int64_t>(row_position_.size());
  resize(*rows, N * half);
  for (int64_t r = 0; r < N; ++r) {
    const std::vector<float>& from = row_long_[static_cast<size_t>(r)] ? long_table : table;
    std::memcpy(rows->data() + r * half, from.data() + row_position_[static_cast<size_t>(r)] * half,
                static_cast<size_t>(half) * sizeof(float));
  }
}

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

void KvDecoder::append_batch(ParamAccess& params, std::span<const SlotTokens> given,
                             float* logits) {
  const ModelConfig& c = layout_.config();
  const int64_t C = c.hidden_size, V = c.vocab_size;
  ZERO_CHECK(!given.empty(), "KvDecoder: an append with no entries");
  // longrope: an entry passing the original context re-encodes its slot from position 0.
  const std::span<const SlotTokens> entries = longrope_.entries_to_run(given, lengths_);
  // The rows of every entry, packed in entry order: their slots, positions, tables and tokens.
  row_slot_.clear();
  row_position_.clear();
  row_long_.clear();
  entry_row_.assign(1, 0);
  std::vector<int32_t> tokens;
  std::vector<bool> seen(lengths_.size(), false);
  for (const SlotTokens& e : entries) {
    ZERO_CHECK(e.slot >= 0 && e.slot < slots() && !seen[static_cast<size_t>(e.slot)],
               "KvDecoder: slot ", e.slot, " of ", slots(), " (or twice in one append)");
    seen[static_cast<size_t>(e.slot)] = true;
    const int64_t length = lengths_[static_cast<size_t>(e.slot)];
    ZERO_CHECK(e.n >= 1 && length + e.n <= capacity_, "KvDecoder: ", e.n, " tokens at position ",
               length, " of slot ", e.slot, " exceed the capacity ", capacity_);
    const bool long_table = longrope_.long_table(length + e.n);
    for (int64_t i = 0; i < e.n; ++i) {
      row_slot_.push_back(e.slot);
      row_position_.push_back(length + i);
      row_long_.push_back(long_table);
    }
    tokens.insert(tokens.end(), e.tokens, e.tokens + e.n);
    entry_row_.push_back(entry_row_.back() + e.n);
  }
  const int64_t N = static_cast<int64_t>(tokens.size());
  const int64_t E = static_cast<int64_t>(entries.size());
  std::vector<float> x(static_cast<size_t>(N * C));  // (N, C)

  // The embedding of each entry's rows at its own positions (GPT-2's position rows).
  const int emb = layout_.embedding_unit();
  {
    AcquiredUnit w(params, emb, widened_embedding_);
    for (int64_t e = 0; e < E; ++e) {
      const int64_t first = entry_row_[static_cast<size_t>(e)];
      const SlotTokens& entry = entries[static_cast<size_t>(e)];
      const ForwardContext at{
          .config = c, .B = 1, .T = entry.n, .position = lengths_[static_cast<size_t>(entry.slot)]};
      embedding_forward(at, layout_.unit(emb), w, tokens.data() + first, x.data() + first * C);
    }
  }

  // The blocks see the N rows as one sequence at position 0 whose RoPE tables are each row's own
  // (gathered); attention keeps the rows' slots apart. fp32 GEMMs.
  if (!rope_cos_.empty()) {
    gather_rope(rope_cos_, rope_cos_long_, &rows_cos_);
    gather_rope(rope_sin_, rope_sin_long_, &rows_sin_);
  }
  if (!rope_cos_local_.empty()) {  // never longrope (Phi-3 only, one RoPE)
    gather_rope(rope_cos_local_, rope_cos_local_, &rows_cos_local_);
    gather_rope(rope_sin_local_, rope_sin_local_, &rows_sin_local_);
  }
  const ForwardContext ctx{
      .config = c,
      .B = 1,
      .T = N,
      .position = 0,
      .rope_cos = rows_cos_.data(),
      .rope_sin = rows_sin_.data(),
      .rope_cos_local = rope_cos_local_.empty() ? nullptr : rows_cos_local_.data(),
      .rope_sin_local = rope_cos_local_.empty() ? nullptr : rows_sin_local_.data()};
  // Each block in place: x becomes its output.
  const BlockBuffers b = block_buffers(N);
  CachedAttention attention(*this, entries);
  for (int l = 0; l < c.num_layers; ++l) {
    const int unit = layout_.block_unit(l);
    AcquiredUnit w(params, unit, widened_unit_);
    block_forward(ctx, layout_.unit(unit), w, x.data(), x.data(), b, attention);
  }

  // Final norm and head for each entry's last row only (the tied head reads the embedding unit).
  resize(last_rows_, E * C);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t last = entry_row_[static_cast<size_t>(e) + 1] - 1;
    std::memcpy(last_rows_.data() + e * C, x.data() + last * C,
                static_cast<size_t>(C) * sizeof(float));
  }
  const int fin = layout_.final_unit();
  const UnitSpec& fu = layout_.unit(fin);
  AcquiredUnit fw(params, fin, widened_unit_);
  const FinalBuffers fb{norm_.data(), mean_.data(), rstd_.data()};  // N >= E rows each
  if (const ParamSpec* lm = fu.find(ParamKind::kLmHead)) {
    final_forward(ctx, fu, fw, fw + lm->offset, last_rows_.data(), E, fb, logits);
  } else {
    AcquiredUnit ew(params, emb, widened_embedding_);
    const float* head = ew + layout_.unit(emb).param(ParamKind::kTokenEmbedding).offset;
    final_forward(ctx, fu, fw, head, last_rows_.data(), E, fb, logits);
  }
  if (c.final_logit_softcapping > 0) {  // Gemma 2
    const float cap = static_cast<float>(c.final_logit_softcapping);
    for (int64_t v = 0; v < E * V; ++v) logits[v] = cap * std::tanh(logits[v] / cap);
  }
  for (const SlotTokens& e : entries) lengths_[static_cast<size_t>(e.slot)] += e.n;
}

void KvDecoder::attend(int layer, const float* q, float* y) const {
  const ModelConfig& c = layout_.config();
  const int64_t Hq = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim(), group = Hq / Hkv;
  const int64_t N = static_cast<int64_t>(row_position_.size());
  const float scale = 1.0f / (std::sqrt(static_cast<float>(D)) *
                              static_cast<float>(c.attention_score_divisor(layer)));
  const int64_t window = c.attention_window(layer);
  const float cap = static_cast<float>(c.attn_logit_softcapping);  // Gemma 2; 0: none
  const int64_t most_keys = *std::max_element(row_position_.begin(), row_position_.end()) + 1;
#pragma omp parallel
  {
    std::vector<float> p(static_cast<size_t>(most_keys));
#pragma omp for collapse(2) schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t slot = row_slot_[static_cast<size_t>(i)];
        const float* K = k_cache_[static_cast<size_t>(layer)].data() + slot * capacity_ * kv_;
        const float* Vc = v_cache_[static_cast<size_t>(layer)].data() + slot * capacity_ * kv_;
        const int64_t keys = row_position_[static_cast<size_t>(i)] + 1;  // causal: [0, position]
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
