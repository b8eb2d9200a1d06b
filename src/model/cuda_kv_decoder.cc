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

// Attention of the n new rows over the layer's cache: their keys and values join it at positions
// [length_, length_ + n) (already there when the block wrote them into the cache rows it was
// given), then each row attends over every position up to its own. A prefill into an empty cache
// is training's causal attention over these rows alone: the flash kernel (attention_cuda.h), which
// reuses each key tile across query rows; otherwise decode_attention (a block per row and head).
class CudaKvDecoder::CacheAttention final : public CudaBlockAttention {
 public:
  CacheAttention(CudaKvDecoder& decoder, int64_t n) : decoder_(decoder), n_(n) {}
  void forward(int layer, const float* q, const float* k, const float* v, float* y) override {
    const ModelConfig& c = decoder_.model_.layout().config();
    cudaStream_t s = decoder_.model_.stream();
    const size_t bytes = static_cast<size_t>(n_ * decoder_.kv_) * sizeof(float);
    float* k_dst = decoder_.k_rows(layer);
    float* v_dst = decoder_.v_rows(layer);
    if (k != k_dst) {
      CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(k_dst, k, bytes, cudaMemcpyDeviceToDevice, s));
    }
    if (v != v_dst) {
      CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(v_dst, v, bytes, cudaMemcpyDeviceToDevice, s));
    }
    if (decoder_.length_ == 0 && n_ > 1) {
      kc::attention_forward<float>(y, decoder_.lse_, q, k_dst, v_dst, 1, n_, c.num_heads,
                                   c.num_kv_heads, c.head_dim(), s, c.attention_window(layer),
                                   c.attention_score_divisor(layer));
      return;
    }
    kc::decode_attention(y, q, decoder_.k_cache(layer), decoder_.v_cache(layer), n_,
                         decoder_.length_, c.num_heads, c.num_kv_heads, c.head_dim(),
                         decoder_.attention_scratch_, s, c.attention_window(layer),
                         c.attention_score_divisor(layer));
  }

 private:
  CudaKvDecoder& decoder_;
  int64_t n_;
};

int64_t CudaKvDecoder::cache_bytes(const ModelConfig& c, int64_t capacity) {
  return 2 * c.num_layers * capacity * c.num_kv_heads * c.head_dim() *
         static_cast<int64_t>(sizeof(float));
}

StatusOr<std::unique_ptr<CudaKvDecoder>> CudaKvDecoder::create(CudaTransformer& model,
                                                               int64_t capacity) {
  const ModelConfig& c = model.layout().config();
  if (capacity < 1) return invalid_argument("key/value cache of {} positions", capacity);
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
  std::unique_ptr<CudaKvDecoder> d(new CudaKvDecoder(model, capacity));
  const int64_t D = c.head_dim();
  const int64_t half = capacity * (D / 2);
  Carver sizing(nullptr);
  sizing.take<float>(cache_bytes(c, capacity) / static_cast<int64_t>(sizeof(float)));
  const int64_t scratch_bytes = static_cast<int64_t>(kc::decode_attention_scratch_bytes(D));
  sizing.take<char>(scratch_bytes);
  const int tables = c.arch != Arch::kLlama ? 0 : (c.local_rope_theta > 0 ? 4 : 2);
  for (int t = 0; t < tables; ++t) sizing.take<float>(half);
  d->fixed_bytes_ = sizing.bytes();
  if (const cudaError_t err = cudaMalloc(&d->fixed_, d->fixed_bytes_); err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free allocation error
    return resource_exhausted("key/value cache of {} positions ({} bytes on the GPU): {}", capacity,
                              d->fixed_bytes_, cudaGetErrorString(err));
  }
  Carver cv(d->fixed_);
  cv.take<float>(cache_bytes(c, capacity) / static_cast<int64_t>(sizeof(float)));
  d->attention_scratch_ = cv.take<char>(scratch_bytes);
  // The tables of every cached position, in double on the host as the CPU model computes them.
  auto upload_tables = [&](float* cos_dev, float* sin_dev, double theta,
                           const kernels::cpu::RopeScaling& scaling) {
    std::vector<float> cos(static_cast<size_t>(half)), sin(static_cast<size_t>(half));
    kernels::cpu::rope_tables(cos.data(), sin.data(),
                              kernels::cpu::rope_inv_freq(D, theta, scaling, capacity), capacity,
                              scaling.attention_factor);
    const size_t bytes = static_cast<size_t>(half) * sizeof(float);
    cudaStream_t s = model.stream();
    CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(cos_dev, cos.data(), bytes, cudaMemcpyHostToDevice, s));
    CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(sin_dev, sin.data(), bytes, cudaMemcpyHostToDevice, s));
    // Why: the copies read the host vectors, which end here (once per decoder).
    CUDA_ABORT_IF_ERROR(cudaStreamSynchronize(s));
  };
  if (tables >= 2) {
    d->rope_cos_ = cv.take<float>(half);
    d->rope_sin_ = cv.take<float>(half);
    upload_tables(d->rope_cos_, d->rope_sin_, c.rope_theta, c.rope_scaling);
  }
  if (tables == 4) {
    d->rope_cos_local_ = cv.take<float>(half);
    d->rope_sin_local_ = cv.take<float>(half);
    upload_tables(d->rope_cos_local_, d->rope_sin_local_, c.local_rope_theta, c.local_rope_scaling);
  }
  return d;
}

CudaKvDecoder::CudaKvDecoder(CudaTransformer& model, int64_t capacity)
    : model_(model),
      capacity_(capacity),
      kv_(model.layout().config().num_kv_heads * model.layout().config().head_dim()),
      acts_(std::make_unique<CudaTransformer::BlockActs>()) {}

CudaKvDecoder::~CudaKvDecoder() {
  // Why: queued kernels may still read the cache and the scratch.
  cudaStreamSynchronize(model_.stream());
  if (rows_slab_ != nullptr) cudaFree(rows_slab_);
  if (fixed_ != nullptr) cudaFree(fixed_);
}

float* CudaKvDecoder::k_cache(int layer) const {
  return reinterpret_cast<float*>(fixed_) + 2 * layer * capacity_ * kv_;
}

float* CudaKvDecoder::v_cache(int layer) const { return k_cache(layer) + capacity_ * kv_; }

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
    final_norm_ = f(C);
    final_mean_ = f(1);
    final_rstd_ = f(1);
    logits_ = f(V);
    return cv.bytes();
  };
  const size_t bytes = carve(nullptr);
  if (rows_slab_ != nullptr) {
    // Why the free's device sync is harmless: the scratch grows on the first appends only (the
    // prompt's prefill, then its one-row decode steps fit).
    CUDA_ABORT_IF_ERROR(cudaFree(rows_slab_));
    rows_slab_ = nullptr;
  }
  CUDA_ABORT_IF_ERROR(cudaMalloc(&rows_slab_, bytes));
  carve(rows_slab_);
  rows_bytes_ = bytes;
  rows_ = n;
}

void CudaKvDecoder::append(ParamAccess& params, const int32_t* tokens, int64_t n, float* logits) {
  const ModelLayout& layout = model_.layout();
  const ModelConfig& c = layout.config();
  ZERO_CHECK(n >= 1 && length_ + n <= capacity_, "CudaKvDecoder: ", n, " tokens at position ",
             length_, " exceed the capacity ", capacity_);
  ensure_rows(n);
  const int64_t C = c.hidden_size, V = c.vocab_size, D = c.head_dim();
  CudaTransformer::Buffers& mb = *model_.buffers_;
  cudaStream_t s = model_.stream();
  host_tokens_.assign(tokens, tokens + n);
  CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(tokens_, host_tokens_.data(),
                                      static_cast<size_t>(n) * sizeof(int32_t),
                                      cudaMemcpyHostToDevice, s));
  // One sequence of the n new rows at positions [length_, length_ + n).
  const bool llama = c.arch == Arch::kLlama;
  const CudaForwardContext ctx{
      .config = c,
      .B = 1,
      .T = n,
      .rope_cos = llama ? rope_cos_ + length_ * (D / 2) : nullptr,
      .rope_sin = llama ? rope_sin_ + length_ * (D / 2) : nullptr,
      .rope_cos_local = rope_cos_local_ ? rope_cos_local_ + length_ * (D / 2) : nullptr,
      .rope_sin_local = rope_sin_local_ ? rope_sin_local_ + length_ * (D / 2) : nullptr,
      .x16 = x16_};

  float* x = x_a_;
  float* x_next = x_b_;
  const int emb = layout.embedding_unit();
  {
    AcquiredUnit w(params, emb, layout.unit(emb), mb.widened_embedding, s);
    // GPT-2's position rows start at the first new position.
    model_.embed_forward(x, tokens_, *w, 1, n, /*first_position=*/length_, s);
  }

  CacheAttention attention(*this, n);
  for (int l = 0; l < c.num_layers; ++l) {
    const int unit = layout.block_unit(l);
    AcquiredUnit w(params, unit, layout.unit(unit), mb.widened_unit, s);
    // The block writes this layer's new keys (GPT-2 after the split, Llama after RoPE) and values
    // straight into the cache rows.
    CudaTransformer::BlockActs a = *acts_;
    (llama ? a.k_rot : a.k) = k_rows(l);
    a.v = v_rows(l);
    model_.block_forward(ctx, *w, x, x_next, a, attention);
    std::swap(x, x_next);
  }

  // Final norm and head for the last row only (the tied head reads the embedding unit).
  const float* last = x + (n - 1) * C;
  const int fin = layout.final_unit();
  const UnitSpec& fu = layout.unit(fin);
  {
    AcquiredUnit fw(params, fin, fu, mb.widened_unit, s);
    model_.final_norm_forward(final_norm_, final_mean_, final_rstd_, last, *fw, 1, s);
    const int64_t logits_ld = CudaTransformer::logits_row_stride(fw->dtype, V);
    if (fu.find(ParamKind::kLmHead) != nullptr) {
      model_.head_forward(logits_, logits_ld, final_norm_, *fw, ParamKind::kLmHead, 1, x16_);
    } else {
      AcquiredUnit ew(params, emb, layout.unit(emb), mb.widened_embedding, s);
      model_.head_forward(logits_, logits_ld, final_norm_, *ew, ParamKind::kTokenEmbedding, 1,
                          x16_);
    }
  }
  CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(logits, logits_, static_cast<size_t>(V) * sizeof(float),
                                      cudaMemcpyDeviceToHost, s));
  // Why: sampling reads the logits on the host when append returns (and host_tokens_ may change
  // once the copy that reads it ran).
  CUDA_ABORT_IF_ERROR(cudaStreamSynchronize(s));
  length_ += n;
}

}  // namespace zero::model
