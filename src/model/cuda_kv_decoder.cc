// CudaKvDecoder (cuda_kv_decoder.h): KvDecoder's append with the CUDA model's kernels.
// Legend: n new rows, C hidden, F intermediate, Hq / Hkv heads, D head dim, V vocab, L layers.
#include "model/cuda_kv_decoder.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <utility>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/dtype.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/attention/decode_attention_cuda.h"
#include "kernels/elementwise/elementwise_cuda.h"
#include "kernels/encoder/encoder_cuda.h"
#include "kernels/layernorm/layernorm_cuda.h"
#include "kernels/matmul/matmul_cuda.h"
#include "kernels/rmsnorm/rmsnorm_cuda.h"
#include "kernels/rope/rope.h"
#include "model/cuda_transformer_buffers.h"
#include "model/cuda_transformer_kernels.h"

namespace zero::model {

namespace kc = kernels::cuda;

// RAII acquire of one unit as the model reads it: as stored, with a 16-bit unit's small parameters
// widened into the model's buffer (CudaTransformer's own acquire, on its buffers).
class CudaKvDecoder::AcquiredUnit {
 public:
  AcquiredUnit(ParamAccess& params, int u, const UnitSpec& spec,
               CudaTransformer::DeviceWiden& buffer, cudaStream_t stream)
      : params_(params), unit_(u), values_(buffer.widen(params.acquire(u), spec, stream)) {}
  // The kernels reading the unit are enqueued (the model's stream contract).
  ~AcquiredUnit() { params_.release(unit_); }
  AcquiredUnit(const AcquiredUnit&) = delete;
  AcquiredUnit& operator=(const AcquiredUnit&) = delete;
  const CudaTransformer::DeviceUnit& operator*() const { return values_; }
  const CudaTransformer::DeviceUnit* operator->() const { return &values_; }

 private:
  ParamAccess& params_;
  int unit_;
  CudaTransformer::DeviceUnit values_;
};

// Attention of each entry's new rows over its slot of the layer's cache: their keys and values join
// it at positions [length, length + n) (already there when the block wrote them into the cache rows
// it was given: one entry), then each row attends over every position of its slot up to its own.
// A prefill into an empty slot is training's causal attention over these rows alone: the flash
// kernel (attention_cuda.h), which reuses each key tile across query rows; otherwise
// decode_attention (a block per row and head). One launch per entry.
class CudaKvDecoder::CacheAttention final : public CudaBlockAttention {
 public:
  CacheAttention(CudaKvDecoder& decoder, std::span<const SlotTokens> entries)
      : decoder_(decoder), entries_(entries) {}
  void forward(int layer, const float* q, const float* k, const float* v, float* y) override {
    const ModelConfig& c = decoder_.model_.layout().config();
    cudaStream_t s = decoder_.model_.stream();
    const int64_t HqD = c.num_heads * c.head_dim(), kv = decoder_.kv_;
    for (size_t e = 0; e < entries_.size(); ++e) {
      const SlotTokens& entry = entries_[e];
      const int64_t row = decoder_.entry_row_[e], n = entry.n;
      const int64_t length = decoder_.lengths_[static_cast<size_t>(entry.slot)];
      const size_t bytes = static_cast<size_t>(n * kv) * sizeof(float);
      if (decoder_.cache_dtype_ == DType::kBF16) {
        // The new keys and values rounded into the bf16 cache; attention reads them widened, the
        // prefill too (no flash kernel over a bf16 cache), so every row sees the same values.
        auto* k_dst = static_cast<__nv_bfloat16*>(decoder_.k_rows(layer, entry));
        auto* v_dst = static_cast<__nv_bfloat16*>(decoder_.v_rows(layer, entry));
        kc::cast<float, __nv_bfloat16>(k + row * kv, k_dst, n * kv, s);
        kc::cast<float, __nv_bfloat16>(v + row * kv, v_dst, n * kv, s);
        kc::decode_attention(y + row * HqD, q + row * HqD,
                             static_cast<const __nv_bfloat16*>(decoder_.k_cache(layer, entry.slot)),
                             static_cast<const __nv_bfloat16*>(decoder_.v_cache(layer, entry.slot)),
                             n, length, c.num_heads, c.num_kv_heads, c.head_dim(),
                             decoder_.attention_scratch_, s, c.attention_window(layer),
                             c.attention_score_divisor(layer), c.attn_logit_softcapping);
        continue;
      }
      auto* k_dst = static_cast<float*>(decoder_.k_rows(layer, entry));
      auto* v_dst = static_cast<float*>(decoder_.v_rows(layer, entry));
      if (k + row * kv != k_dst) {
        CUDA_ABORT_IF_ERROR(
            cudaMemcpyAsync(k_dst, k + row * kv, bytes, cudaMemcpyDeviceToDevice, s));
      }
      if (v + row * kv != v_dst) {
        CUDA_ABORT_IF_ERROR(
            cudaMemcpyAsync(v_dst, v + row * kv, bytes, cudaMemcpyDeviceToDevice, s));
      }
      if (length == 0 && n > 1) {
        kc::attention_forward<float>(y + row * HqD, decoder_.lse_, q + row * HqD, k_dst, v_dst, 1,
                                     n, c.num_heads, c.num_kv_heads, c.head_dim(), s,
                                     c.attention_window(layer), c.attention_score_divisor(layer),
                                     c.attn_logit_softcapping);
        continue;
      }
      kc::decode_attention(y + row * HqD, q + row * HqD,
                           static_cast<const float*>(decoder_.k_cache(layer, entry.slot)),
                           static_cast<const float*>(decoder_.v_cache(layer, entry.slot)), n,
                           length, c.num_heads, c.num_kv_heads, c.head_dim(),
                           decoder_.attention_scratch_, s, c.attention_window(layer),
                           c.attention_score_divisor(layer), c.attn_logit_softcapping);
    }
  }

 private:
  CudaKvDecoder& decoder_;
  std::span<const SlotTokens> entries_;
};

int64_t CudaKvDecoder::cache_bytes(const ModelConfig& c, int64_t capacity, int64_t slots,
                                   DType cache_dtype) {
  return 2 * c.num_layers * slots * capacity * c.num_kv_heads * c.head_dim() *
         static_cast<int64_t>(dtype_bytes(cache_dtype));
}

StatusOr<std::unique_ptr<CudaKvDecoder>> CudaKvDecoder::create(CudaTransformer& model,
                                                               int64_t capacity, int64_t slots,
                                                               DType cache_dtype) {
  const ModelConfig& c = model.layout().config();
  if (capacity < 1 || slots < 1) {
    return invalid_argument("key/value cache of {} positions for {} sequences", capacity, slots);
  }
  if (cache_dtype != DType::kF32 && cache_dtype != DType::kBF16) {
    return invalid_argument("a key/value cache in {}: fp32 or bf16 only", dtype_name(cache_dtype));
  }
  if (c.arch == Arch::kGpt2 && capacity > c.max_position_embeddings) {
    return invalid_argument("key/value cache of {} positions exceeds max_position_embeddings {}",
                            capacity, c.max_position_embeddings);
  }
  // "dynamic" RoPE changes its frequencies as HF's cache grows past max_position_embeddings;
  // within it the tables are the default ones (KvDecoder's limit).
  if (c.arch == Arch::kLlama && c.rope_scaling.type == "dynamic" &&
      capacity > c.max_position_embeddings) {
    return invalid_argument(
        "key/value cache of {} positions exceeds max_position_embeddings {} with dynamic RoPE "
        "(not supported)",
        capacity, c.max_position_embeddings);
  }
  std::unique_ptr<CudaKvDecoder> d(new CudaKvDecoder(model, capacity, slots, cache_dtype));
  const int64_t D = c.head_dim();
  const int64_t half = capacity * (D / 2);
  Carver sizing(nullptr);
  sizing.take<char>(cache_bytes(c, capacity, slots, cache_dtype));
  const int64_t scratch_bytes = static_cast<int64_t>(kc::decode_attention_scratch_bytes(D));
  sizing.take<char>(scratch_bytes);
  // cos and sin: the global layers', Gemma 3's sliding layers', longrope's long factors'.
  const int tables = c.arch != Arch::kLlama
                         ? 0
                         : 2 + (c.local_rope_theta > 0 ? 2 : 0) + (d->longrope_.active() ? 2 : 0);
  for (int t = 0; t < tables; ++t) sizing.take<float>(half);
  d->fixed_bytes_ = sizing.bytes();
  if (const cudaError_t err = cudaMalloc(&d->fixed_, d->fixed_bytes_); err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free allocation error
    return resource_exhausted(
        "key/value cache of {} positions for {} sequences ({} bytes on the GPU): {}", capacity,
        slots, d->fixed_bytes_, cudaGetErrorString(err));
  }
  Carver cv(d->fixed_);
  cv.take<char>(cache_bytes(c, capacity, slots, cache_dtype));
  d->attention_scratch_ = cv.take<char>(scratch_bytes);
  // The tables of every cached position, in double on the host as the CPU model computes them.
  // With several slots the host keeps them (a batch's rows are gathered from them).
  // `length`: the sequence length the frequencies are for (longrope: short or long factors).
  auto upload_tables = [&](float* cos_dev, float* sin_dev, double theta,
                           const kernels::cpu::RopeScaling& scaling, int64_t length,
                           std::vector<float>* host_cos, std::vector<float>* host_sin) {
    std::vector<float> cos(static_cast<size_t>(half)), sin(static_cast<size_t>(half));
    kernels::cpu::rope_tables(cos.data(), sin.data(),
                              kernels::cpu::rope_inv_freq(D, theta, scaling, length), capacity,
                              scaling.attention_factor);
    const size_t bytes = static_cast<size_t>(half) * sizeof(float);
    cudaStream_t s = model.stream();
    CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(cos_dev, cos.data(), bytes, cudaMemcpyHostToDevice, s));
    CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(sin_dev, sin.data(), bytes, cudaMemcpyHostToDevice, s));
    // Why: the copies read the host vectors, which end here (once per decoder).
    CUDA_ABORT_IF_ERROR(cudaStreamSynchronize(s));
    if (slots > 1) {
      *host_cos = std::move(cos);
      *host_sin = std::move(sin);
    }
  };
  if (tables >= 2) {
    d->rope_cos_ = cv.take<float>(half);
    d->rope_sin_ = cv.take<float>(half);
    upload_tables(d->rope_cos_, d->rope_sin_, c.rope_theta, c.rope_scaling,
                  d->longrope_.short_table_length(capacity), &d->host_cos_, &d->host_sin_);
  }
  if (c.arch == Arch::kLlama && c.local_rope_theta > 0) {
    d->rope_cos_local_ = cv.take<float>(half);
    d->rope_sin_local_ = cv.take<float>(half);
    upload_tables(d->rope_cos_local_, d->rope_sin_local_, c.local_rope_theta, c.local_rope_scaling,
                  capacity, &d->host_cos_local_, &d->host_sin_local_);
  }
  if (d->longrope_.active()) {  // the same attention factor as the short table's
    d->rope_cos_long_ = cv.take<float>(half);
    d->rope_sin_long_ = cv.take<float>(half);
    upload_tables(d->rope_cos_long_, d->rope_sin_long_, c.rope_theta, c.rope_scaling, capacity,
                  &d->host_cos_long_, &d->host_sin_long_);
  }
  return d;
}

CudaKvDecoder::CudaKvDecoder(CudaTransformer& model, int64_t capacity, int64_t slots,
                             DType cache_dtype)
    : model_(model),
      capacity_(capacity),
      cache_dtype_(cache_dtype),
      lengths_(static_cast<size_t>(slots), 0),
      kv_(model.layout().config().num_kv_heads * model.layout().config().head_dim()),
      longrope_(model.layout().config().rope_scaling, capacity, slots),
      acts_(std::make_unique<CudaTransformer::BlockActs>()) {}

CudaKvDecoder::~CudaKvDecoder() {
  // Why: queued kernels may still read the cache and the scratch.
  cudaStreamSynchronize(model_.stream());
  if (rows_slab_ != nullptr) cudaFree(rows_slab_);
  if (fixed_ != nullptr) cudaFree(fixed_);
}

void* CudaKvDecoder::k_cache(int layer, int64_t slot) const {
  const int64_t layer_elements = slots() * capacity_ * kv_;  // K or V of one layer
  return fixed_ + (2 * layer * layer_elements + slot * capacity_ * kv_) * element_bytes();
}

void* CudaKvDecoder::v_cache(int layer, int64_t slot) const {
  return static_cast<char*>(k_cache(layer, slot)) + slots() * capacity_ * kv_ * element_bytes();
}

void CudaKvDecoder::ensure_rows(int64_t n) {
  if (n <= rows_) return;
  const ModelConfig& c = model_.layout().config();
  const int64_t C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t HqD = c.num_heads * c.head_dim();
  const bool gpt2 = c.arch == Arch::kGpt2;
  // A 16-bit model's GEMM operand copies: n rows of the widest dense-layer input, padded to 8.
  const int64_t widest_in = (std::max({C, F, HqD}) + 7) / 8 * 8;
  auto carve = [&](char* base) {
    Carver cv(base);
    auto f = [&](int64_t numel) { return cv.take<float>(numel); };
    CudaTransformer::BlockActs& a = *acts_;
    // norm1 and norm2 (and their statistics) share storage: norm1 is dead once q, k, v exist.
    a.norm1 = a.norm2 = f(n * C);
    a.mean1 = a.mean2 = f(n);
    a.rstd1 = a.rstd2 = f(n);
    a.qkv = gpt2 ? f(n * 3 * C) : nullptr;
    a.q = f(n * HqD);
    a.k = f(n * kv_);  // GPT-2 writes its keys straight into the cache rows instead (append)
    a.v = nullptr;     // the cache rows
    a.q_rot = gpt2 ? nullptr : f(n * HqD);
    a.k_rot = nullptr;                                    // Llama: the cache rows
    a.q_rstd = c.qk_norm ? f(n * c.num_heads) : nullptr;  // Qwen3: q_norm / k_norm statistics
    a.k_rstd = c.qk_norm ? f(n * c.num_kv_heads) : nullptr;
    if (c.post_norms) {  // Gemma 3 (the two post-norms' statistics share storage: unread)
      a.attn_out = f(n * C);
      a.mlp_out = f(n * C);
      a.rstd_post_attn = a.rstd_post_mlp = f(n);
      a.gate_act = f(n * F);
    }
    a.lse = nullptr;  // the backward's; the prefill's attention writes lse_ (unread)
    a.attn_y = f(n * HqD);
    a.x2 = f(n * C);
    a.gate = gpt2 ? nullptr : f(n * F);
    a.up = f(n * F);
    a.act = f(n * F);
    x_a_ = f(n * C);
    x_b_ = f(n * C);
    tokens_ = cv.take<int32_t>(n);
    x16_ = cv.take<uint16_t>(n * widest_in);
    lse_ = f(c.num_heads * n);
    const int64_t S = slots();
    if (S > 1 || cache_dtype_ != DType::kF32) {
      k_new_ = f(n * kv_);
      v_new_ = f(n * kv_);
    }
    if (S > 1) {
      const int64_t half = c.head_dim() / 2;
      rows_cos_ = host_cos_.empty() ? nullptr : f(n * half);
      rows_sin_ = host_sin_.empty() ? nullptr : f(n * half);
      rows_cos_local_ = host_cos_local_.empty() ? nullptr : f(n * half);
      rows_sin_local_ = host_sin_local_.empty() ? nullptr : f(n * half);
      last_rows_ = f(S * C);
    }
    final_norm_ = f(S * C);
    final_mean_ = f(S);
    final_rstd_ = f(S);
    logits_ = f(S * ((V + 7) / 8 * 8));  // rows logits_row_stride apart (at most V rounded to 8)
    return cv.bytes();
  };
  const size_t bytes = carve(nullptr);
  if (rows_slab_ != nullptr) {
    // Why the free's device sync is harmless: the scratch grows on the first appends only (to the
    // largest step: a prompt's prefill, beside a batch's decode rows; later steps fit).
    CUDA_ABORT_IF_ERROR(cudaFree(rows_slab_));
    rows_slab_ = nullptr;
  }
  CUDA_ABORT_IF_ERROR(cudaMalloc(&rows_slab_, bytes));
  carve(rows_slab_);
  rows_bytes_ = bytes;
  rows_ = n;
}

int64_t CudaKvDecoder::slot_length(int64_t slot) const {
  ZERO_CHECK(slot >= 0 && slot < slots(), "CudaKvDecoder: slot ", slot, " of ", slots());
  return lengths_[static_cast<size_t>(slot)];
}

void CudaKvDecoder::reset_slot(int64_t slot) {
  ZERO_CHECK(slot >= 0 && slot < slots(), "CudaKvDecoder: slot ", slot, " of ", slots());
  lengths_[static_cast<size_t>(slot)] = 0;
}

int64_t CudaKvDecoder::pack_rows(std::span<const SlotTokens> entries) {
  ZERO_CHECK(!entries.empty(), "CudaKvDecoder: an append with no entries");
  host_tokens_.clear();
  row_positions_.clear();
  row_long_.clear();
  entry_row_.assign(1, 0);
  std::vector<bool> seen(lengths_.size(), false);
  for (const SlotTokens& e : entries) {
    ZERO_CHECK(e.slot >= 0 && e.slot < slots() && !seen[static_cast<size_t>(e.slot)],
               "CudaKvDecoder: slot ", e.slot, " of ", slots(), " (or twice in one append)");
    seen[static_cast<size_t>(e.slot)] = true;
    const int64_t length = lengths_[static_cast<size_t>(e.slot)];
    ZERO_CHECK(e.n >= 1 && length + e.n <= capacity_, "CudaKvDecoder: ", e.n,
               " tokens at position ", length, " of slot ", e.slot, " exceed the capacity ",
               capacity_);
    host_tokens_.insert(host_tokens_.end(), e.tokens, e.tokens + e.n);
    for (int64_t i = 0; i < e.n; ++i) row_positions_.push_back(length + i);
    row_long_.insert(row_long_.end(), static_cast<size_t>(e.n), longrope_.long_table(length + e.n));
    entry_row_.push_back(entry_row_.back() + e.n);
  }
  return static_cast<int64_t>(host_tokens_.size());
}

void CudaKvDecoder::upload_rope_rows(const std::vector<float>& table,
                                     const std::vector<float>& long_table,
                                     std::vector<float>* staging, float* rows) {
  if (table.empty()) return;
  const int64_t half = model_.layout().config().head_dim() / 2;
  staging->resize(row_positions_.size() * static_cast<size_t>(half));
  for (size_t r = 0; r < row_positions_.size(); ++r) {
    const std::vector<float>& from = row_long_[r] ? long_table : table;
    std::copy_n(from.data() + row_positions_[r] * half, half,
                staging->data() + r * static_cast<size_t>(half));
  }
  CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(rows, staging->data(), staging->size() * sizeof(float),
                                      cudaMemcpyHostToDevice, model_.stream()));
}

void CudaKvDecoder::append_batch(ParamAccess& params, std::span<const SlotTokens> given,
                                 float* logits) {
  const ModelLayout& layout = model_.layout();
  const ModelConfig& c = layout.config();
  // longrope: an entry passing the original context re-encodes its slot from position 0.
  const std::span<const SlotTokens> entries = longrope_.entries_to_run(given, lengths_);
  const int64_t N = pack_rows(entries), E = static_cast<int64_t>(entries.size());
  ensure_rows(N);
  const int64_t C = c.hidden_size, D = c.head_dim();
  CudaTransformer::Buffers& mb = *model_.buffers_;
  cudaStream_t s = model_.stream();
  CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(tokens_, host_tokens_.data(),
                                      static_cast<size_t>(N) * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, s));
  // One entry: its rows at positions [length, length + n), the tables from there, its keys and
  // values written by the block straight into its fp32 cache rows. Several: the N packed rows as
  // one sequence whose RoPE rows are each row's own. A bf16 cache or several entries: the keys and
  // values through k_new_ / v_new_.
  const bool one = E == 1;
  const bool direct = one && cache_dtype_ == DType::kF32;
  const int64_t first = lengths_[static_cast<size_t>(entries[0].slot)];
  const bool llama = c.arch == Arch::kLlama;
  // One entry's rows all use one table: longrope's long one (else null) or the table.
  const bool long_rows = row_long_.front();
  auto table = [&](float* full, float* full_long, float* rows) -> const float* {
    if (full == nullptr) return nullptr;
    if (!one) return rows;
    return (long_rows ? full_long : full) + first * (D / 2);
  };
  if (!one) {
    upload_rope_rows(host_cos_, host_cos_long_, &host_rows_cos_, rows_cos_);
    upload_rope_rows(host_sin_, host_sin_long_, &host_rows_sin_, rows_sin_);
    // Never longrope (Phi-3 only, one RoPE).
    upload_rope_rows(host_cos_local_, host_cos_local_, &host_rows_cos_local_, rows_cos_local_);
    upload_rope_rows(host_sin_local_, host_sin_local_, &host_rows_sin_local_, rows_sin_local_);
  }
  const CudaForwardContext ctx{
      .config = c,
      .B = 1,
      .T = N,
      .rope_cos = llama ? table(rope_cos_, rope_cos_long_, rows_cos_) : nullptr,
      .rope_sin = llama ? table(rope_sin_, rope_sin_long_, rows_sin_) : nullptr,
      .rope_cos_local = table(rope_cos_local_, rope_cos_local_, rows_cos_local_),
      .rope_sin_local = table(rope_sin_local_, rope_sin_local_, rows_sin_local_),
      .x16 = x16_};

  float* x = x_a_;
  float* x_next = x_b_;
  const int emb = layout.embedding_unit();
  {
    AcquiredUnit w(params, emb, layout.unit(emb), mb.widened_embedding, s);
    for (int64_t e = 0; e < E; ++e) {
      // GPT-2's position rows start at the entry's first new position.
      const SlotTokens& entry = entries[static_cast<size_t>(e)];
      const int64_t row = entry_row_[static_cast<size_t>(e)];
      model_.embed_forward(x + row * C, tokens_ + row, *w, 1, entry.n,
                           /*first_position=*/lengths_[static_cast<size_t>(entry.slot)], s);
    }
  }

  CacheAttention attention(*this, entries);
  for (int l = 0; l < c.num_layers; ++l) {
    const int unit = layout.block_unit(l);
    AcquiredUnit w(params, unit, layout.unit(unit), mb.widened_unit, s);
    // The block writes this layer's new keys (GPT-2 after the split, Llama after RoPE) and values
    // where attention takes them from.
    CudaTransformer::BlockActs a = *acts_;
    (llama ? a.k_rot : a.k) = direct ? static_cast<float*>(k_rows(l, entries[0])) : k_new_;
    a.v = direct ? static_cast<float*>(v_rows(l, entries[0])) : v_new_;
    model_.block_forward(ctx, *w, x, x_next, a, attention);
    std::swap(x, x_next);
  }
  head_of_last_rows(params, entries, x, logits);
  for (const SlotTokens& e : entries) lengths_[static_cast<size_t>(e.slot)] += e.n;
}

void CudaKvDecoder::head_of_last_rows(ParamAccess& params, std::span<const SlotTokens> entries,
                                      const float* x, float* logits) {
  const ModelLayout& layout = model_.layout();
  const ModelConfig& c = layout.config();
  const int64_t C = c.hidden_size, V = c.vocab_size, E = static_cast<int64_t>(entries.size());
  CudaTransformer::Buffers& mb = *model_.buffers_;
  cudaStream_t s = model_.stream();
  // Each entry's last row (one entry: in place).
  const float* last = x + (entry_row_.back() - 1) * C;
  if (E > 1) {
    for (int64_t e = 0; e < E; ++e) {
      CUDA_ABORT_IF_ERROR(
          cudaMemcpyAsync(last_rows_ + e * C, x + (entry_row_[static_cast<size_t>(e) + 1] - 1) * C,
                          static_cast<size_t>(C) * sizeof(float), cudaMemcpyDeviceToDevice, s));
    }
    last = last_rows_;
  }
  // Final norm and head for those rows (the tied head reads the embedding unit).
  const int emb = layout.embedding_unit(), fin = layout.final_unit();
  const UnitSpec& fu = layout.unit(fin);
  int64_t logits_ld = V;
  {
    AcquiredUnit fw(params, fin, fu, mb.widened_unit, s);
    model_.final_norm_forward(final_norm_, final_mean_, final_rstd_, last, *fw, E, s);
    logits_ld = CudaTransformer::logits_row_stride(fw->dtype, V);
    if (fu.find(ParamKind::kLmHead) != nullptr) {
      model_.head_forward(logits_, logits_ld, final_norm_, *fw, ParamKind::kLmHead, E, x16_);
    } else {
      AcquiredUnit ew(params, emb, layout.unit(emb), mb.widened_embedding, s);
      model_.head_forward(logits_, logits_ld, final_norm_, *ew, ParamKind::kTokenEmbedding, E,
                          x16_);
    }
  }
  for (int64_t e = 0; e < E; ++e) {
    CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(logits + e * V, logits_ + e * logits_ld,
                                        static_cast<size_t>(V) * sizeof(float),
                                        cudaMemcpyDeviceToHost, s));
  }
  // Why: sampling reads the logits on the host when append returns (and the host staging of the
  // tokens and RoPE rows may change once the copies that read it ran).
  CUDA_ABORT_IF_ERROR(cudaStreamSynchronize(s));
}

}  // namespace zero::model
