// CudaTransformer: Transformer's orchestration over units (transformer.cc, block_forward.cc,
// gpt2_block.cc, llama_block.cc), step for step, with the CUDA kernels on one stream. All values
// are fp32 on the device except a 16-bit model's GEMM operands (autocast-style: the weights as
// stored, activations and output gradients rounded into 16-bit copies); its small parameters are
// widened exactly into model-owned fp32 buffers. Legend: N = B*T rows, C hidden, F intermediate, V
// vocab, Hq / Hkv heads, D head dim.
#include "model/cuda_transformer.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "core/cuda/device_alloc.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/cross_entropy/cross_entropy_cuda.h"
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

// RAII acquire of one unit as the kernels read it (AcquiredUnit's device twin).
class CudaTransformer::AcquiredDeviceUnit {
 public:
  AcquiredDeviceUnit(ParamAccess& params, int u, const UnitSpec& spec, DeviceWiden& buffer,
                     cudaStream_t stream)
      : params_(params), unit_(u), values_(buffer.widen(params.acquire(u), spec, stream)) {}
  ~AcquiredDeviceUnit() { release(); }
  AcquiredDeviceUnit(const AcquiredDeviceUnit&) = delete;
  AcquiredDeviceUnit& operator=(const AcquiredDeviceUnit&) = delete;

  const DeviceUnit& operator*() const { return values_; }
  const DeviceUnit* operator->() const { return &values_; }
  // Releases the unit now; the kernels reading it are enqueued (see the stream contract).
  void release() {
    if (values_.data == nullptr) return;
    values_.data = nullptr;
    params_.release(unit_);
  }

 private:
  ParamAccess& params_;
  int unit_;
  DeviceUnit values_;
};

StatusOr<std::unique_ptr<CudaTransformer>> CudaTransformer::create(const ModelConfig& config,
                                                                   CudaTransformerOptions options,
                                                                   cudaStream_t stream) {
  auto matmul = kc::MatmulContext::create();
  if (!matmul.ok()) return matmul.status();
  std::unique_ptr<CudaTransformer> model(new CudaTransformer(config, options, stream));
  model->buffers_->matmul = std::move(*matmul);
  if (host_checkpointing(options)) {
    model->buffers_->host_checkpoints = std::make_unique<CudaHostCheckpoints>();
  }
  return model;
}

CudaTransformer::CudaTransformer(const ModelConfig& config, CudaTransformerOptions options,
                                 cudaStream_t stream)
    : layout_(config), options_(options), stream_(stream), buffers_(std::make_unique<Buffers>()) {}

CudaTransformer::~CudaTransformer() {
  // Why: the slab and the widen buffers may still be read by queued kernels (cudaFree would wait
  // for the device anyway; this makes the order explicit).
  cudaStreamSynchronize(stream_);
}

int64_t CudaTransformer::buffer_bytes() const {
  const Buffers& b = *buffers_;
  return static_cast<int64_t>(b.slab_bytes) + b.widened_embedding.bytes() + b.widened_unit.bytes() +
         b.attention16.bytes();
}

namespace {

int64_t round_up_8(int64_t n) { return (n + 7) / 8 * 8; }

}  // namespace

size_t CudaTransformer::carve_slab(const ModelConfig& c, const CudaTransformerOptions& options,
                                   int64_t B, int64_t T, DType dtype, Buffers& bf, char* base) {
  const int64_t N = B * T, C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t D = c.head_dim(), Hq = c.num_heads, Hkv = c.num_kv_heads;
  const bool gpt2 = c.arch == Arch::kGpt2;
  const int n_acts = options.activation_checkpointing ? 1 : static_cast<int>(c.num_layers);
  const int n_residual = host_checkpointing(options) ? CudaHostCheckpoints::kDeviceSlots + 1
                                                     : static_cast<int>(c.num_layers) + 1;
  bf.kernel_scratch_bytes = std::max({kc::layernorm_backward_scratch_bytes(N, C),
                                      kc::rmsnorm_backward_scratch_bytes(N, C),
                                      kc::rmsnorm_backward_scratch_bytes(N * Hq, D),
                                      kc::attention_backward_scratch_bytes(B, T, Hq, Hkv, D),
                                      kc::encoder_backward_scratch_bytes(B, T, V)});
  Carver cv(base);
  auto f = [&](int64_t n) { return cv.take<float>(n); };
  bf.tokens = cv.take<int32_t>(N);
  bf.targets = cv.take<int32_t>(N);
  bf.residual.assign(static_cast<size_t>(n_residual), nullptr);
  for (float*& r : bf.residual) r = f(N * C);
  bf.acts.assign(static_cast<size_t>(n_acts), BlockActs{});
  // Arrays only the block's own forward reads are carved once and shared by every block: GPT-2's
  // fused qkv (split into q, k, v), Llama's q and k before RoPE, and for a 16-bit model the fp32
  // GEMM inputs whose 16-bit copies the backward reads instead (norm1, attn_y, norm2, act). Not
  // Qwen3's q and k: the q_norm / k_norm backward reads them.
  const bool sixteen = dtype != DType::kF32;
  for (size_t i = 0; i < bf.acts.size(); ++i) {
    BlockActs& a = bf.acts[i];
    const BlockActs* first = i > 0 ? &bf.acts[0] : nullptr;
    // `n` floats of its own, or block 0's array of `field` when shared.
    auto own_or_shared = [&](bool shared, float* BlockActs::*field, int64_t n) {
      return shared && first != nullptr ? first->*field : f(n);
    };
    a.norm1 = own_or_shared(sixteen, &BlockActs::norm1, N * C);
    a.mean1 = f(N);
    a.rstd1 = f(N);
    a.qkv = gpt2 ? own_or_shared(true, &BlockActs::qkv, N * 3 * C) : nullptr;
    a.q = own_or_shared(!gpt2 && !c.qk_norm, &BlockActs::q, N * Hq * D);
    a.k = own_or_shared(!gpt2 && !c.qk_norm, &BlockActs::k, N * Hkv * D);
    carve_family_arrays(c, N, a, f);
    a.v = f(N * Hkv * D);
    a.q_rot = gpt2 ? nullptr : f(N * Hq * D);
    a.k_rot = gpt2 ? nullptr : f(N * Hkv * D);
    a.lse = f(B * Hq * T);
    a.attn_y = own_or_shared(sixteen, &BlockActs::attn_y, N * Hq * D);
    a.x2 = f(N * C);
    a.norm2 = own_or_shared(sixteen, &BlockActs::norm2, N * C);
    a.mean2 = f(N);
    a.rstd2 = f(N);
    a.gate = gpt2 ? nullptr : f(N * F);
    a.up = f(N * F);
    a.act = own_or_shared(sixteen, &BlockActs::act, N * F);
    if (sixteen) {
      a.norm1_16 = cv.take<uint16_t>(N * round_up_8(C));
      a.attn_y16 = cv.take<uint16_t>(N * round_up_8(Hq * D));
      a.norm2_16 = cv.take<uint16_t>(N * round_up_8(C));
      a.act16 = cv.take<uint16_t>(N * round_up_8(F));
    }
  }
  bf.dnorm = f(N * C);
  bf.dq = f(N * Hq * D);
  bf.dk = f(N * Hkv * D);
  bf.dv = f(N * Hkv * D);
  bf.dqkv = gpt2 ? f(N * 3 * C) : nullptr;
  bf.dattn_y = f(N * Hq * D);
  bf.dact = f(N * F);
  bf.dup = f(N * F);
  bf.dgate = gpt2 ? nullptr : f(N * F);
  bf.dq_proj = c.qk_norm ? f(N * Hq * D) : nullptr;
  bf.dk_proj = c.qk_norm ? f(N * Hkv * D) : nullptr;
  bf.dpost = c.post_norms ? f(N * C) : nullptr;
  bf.dgelu = c.post_norms ? f(N * F) : nullptr;
  bf.final_norm = f(N * C);
  bf.final_mean = f(N);
  bf.final_rstd = f(N);
  bf.logits_ld = logits_row_stride(dtype, V);
  bf.logits = f(N * bf.logits_ld);
  bf.losses = f(N);
  bf.dloss = f(N);
  bf.loss_sum = cv.take<double>(1);
  bf.dresidual_a = f(N * C);
  bf.dresidual_b = f(N * C);
  bf.rope_cos = gpt2 ? nullptr : f(T * (D / 2));
  bf.rope_sin = gpt2 ? nullptr : f(T * (D / 2));
  bf.rope_cos_local = c.local_rope_theta > 0 ? f(T * (D / 2)) : nullptr;
  bf.rope_sin_local = c.local_rope_theta > 0 ? f(T * (D / 2)) : nullptr;
  bf.kernel_scratch = cv.take<char>(static_cast<int64_t>(bf.kernel_scratch_bytes));
  bf.x16 = bf.dout16 = nullptr;
  if (dtype != DType::kF32) {
    // The GEMM operand copies (dense_forward / dense_backward): the widest input and the widest
    // output gradient, that of a block's dense layer (N rows) or the LM head's (one chunk of
    // lm_head_rows rows, head_backward).
    const int64_t widest_in = std::max({C, F, Hq * D});
    const int64_t widest_out = std::max({F, C, gpt2 ? 3 * C : Hq * D});
    bf.x16 = cv.take<uint16_t>(N * round_up_8(widest_in));
    bf.dout16 = cv.take<uint16_t>(
        std::max(N * round_up_8(widest_out), lm_head_rows(options, N) * round_up_8(V)));
  }
  return cv.bytes();
}

void CudaTransformer::carve_family_arrays(const ModelConfig& c, int64_t N, BlockActs& a,
                                          const std::function<float*(int64_t)>& take) {
  const int64_t C = c.hidden_size, F = c.intermediate_size;
  a.q_rstd = c.qk_norm ? take(N * c.num_heads) : nullptr;
  a.k_rstd = c.qk_norm ? take(N * c.num_kv_heads) : nullptr;
  if (c.post_norms) {
    a.attn_out = take(N * C);
    a.rstd_post_attn = take(N);
    a.mlp_out = take(N * C);
    a.rstd_post_mlp = take(N);
    a.gate_act = take(N * F);
  }
}

int64_t CudaTransformer::logits_row_stride(DType dtype, int64_t V) {
  return dtype == DType::kF32 ? V : round_up_8(V);
}

int64_t CudaTransformer::lm_head_rows(const CudaTransformerOptions& options, int64_t N) {
  ZERO_CHECK(options.lm_head_chunk_rows > 0, "CudaTransformerOptions::lm_head_chunk_rows ",
             options.lm_head_chunk_rows, " <= 0");
  return std::min(N, options.lm_head_chunk_rows);
}

int64_t CudaTransformer::activation_bytes(const ModelConfig& config,
                                          const CudaTransformerOptions& options, int64_t B,
                                          int64_t T, DType dtype) {
  Buffers sizing;
  return static_cast<int64_t>(carve_slab(config, options, B, T, dtype, sizing, nullptr));
}

int64_t CudaTransformer::widen_bytes(const ModelConfig& config, DType dtype) {
  if (dtype == DType::kF32) return 0;
  const ModelLayout layout(config);
  const int emb = layout.embedding_unit();
  int64_t largest_other = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    if (u != emb) largest_other = std::max(largest_other, widened_numel(layout.unit(u)));
  }
  return (widened_numel(layout.unit(emb)) + largest_other) * static_cast<int64_t>(sizeof(float));
}

int64_t CudaTransformer::attention16_bytes(const ModelConfig& config, DType dtype, int64_t B,
                                           int64_t T) {
  if (dtype == DType::kF32) return 0;
  // The backward's set, the larger: q, dout, dq (N, Hq*D) and k, v, dk, dv (N, Hkv*D), each
  // rounded up to 256 bytes as attention16_views carves them.
  const int64_t N = B * T, D = config.head_dim();
  auto rounded = [](int64_t n) { return (n * 2 + 255) / 256 * 256; };
  return 3 * rounded(N * config.num_heads * D) + 4 * rounded(N * config.num_kv_heads * D);
}

int64_t CudaTransformer::host_checkpoint_bytes(const ModelConfig& config,
                                               const CudaTransformerOptions& options, int64_t B,
                                               int64_t T) {
  if (!host_checkpointing(options)) return 0;
  return config.num_layers * B * T * config.hidden_size * static_cast<int64_t>(sizeof(float));
}

float* CudaTransformer::residual_at(int64_t l) const {
  const Buffers& bf = *buffers_;
  if (!host_checkpointing(options_)) return bf.residual[static_cast<size_t>(l)];
  if (l == layout_.config().num_layers) return bf.residual.back();
  return bf.host_checkpoints->device_input(static_cast<int>(l));
}

void CudaTransformer::ensure_buffers(int64_t B, int64_t T, DType dtype) {
  if (B == B_ && T == T_ && dtype == dtype_) return;
  const ModelConfig& c = layout_.config();
  Buffers& bf = *buffers_;
  B_ = B;
  T_ = T;
  dtype_ = dtype;
  if (bf.slab != nullptr) {
    // Why the free's device sync is harmless: the batch shape changes rarely (eval, the last
    // batch). The side stream's copies out of the ring slots are waited for by name: a forward
    // without backward leaves them unawaited by the compute stream.
    if (bf.host_checkpoints != nullptr) bf.host_checkpoints->synchronize();
    CUDA_ABORT_IF_ERROR(cudaFree(bf.slab));
    bf.slab = nullptr;
  }
  bf.slab_bytes = carve_slab(c, options_, B, T, dtype, bf, nullptr);
  // The memory plan sizes the slab with activation_bytes, this very count, for its planned
  // micro-batch.
  const std::string what = fmt::format("the CUDA model's activation slab for {} x {} tokens ({})",
                                       B, T, dtype_name(dtype));
  bf.slab = static_cast<decltype(bf.slab)>(zero::cuda::device_alloc_or_exit(
      {.what = what,
       .bytes = bf.slab_bytes,
       .planned_bytes = activation_bytes(c, options_, B, T, dtype),
       .advice = "a smaller --per_device_train_batch_size or --block_size, or "
                 "--gradient_checkpointing (with activation_checkpointing.cpu_checkpointing)"}));
  carve_slab(c, options_, B, T, dtype, bf, bf.slab);
  if (bf.host_checkpoints != nullptr) {
    std::array<float*, CudaHostCheckpoints::kDeviceSlots> slots{};
    for (size_t i = 0; i < slots.size(); ++i) slots[i] = bf.residual[i];
    bf.host_checkpoints->reset(static_cast<int>(c.num_layers), B * T * c.hidden_size, slots);
  }

  const int64_t D = c.head_dim();
  const bool gpt2 = c.arch == Arch::kGpt2;
  if (!gpt2) {
    // The RoPE tables, computed on the host in double as the CPU model does, then uploaded.
    const size_t n = static_cast<size_t>(T * (D / 2));
    bf.host_rope_cos.assign(n, 0.0f);
    bf.host_rope_sin.assign(n, 0.0f);
    kernels::cpu::rope_tables(bf.host_rope_cos.data(), bf.host_rope_sin.data(),
                              kernels::cpu::rope_inv_freq(D, c.rope_theta, c.rope_scaling, T), T,
                              c.rope_scaling.attention_factor);
    CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(bf.rope_cos, bf.host_rope_cos.data(), n * sizeof(float),
                                        cudaMemcpyHostToDevice, stream_));
    CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(bf.rope_sin, bf.host_rope_sin.data(), n * sizeof(float),
                                        cudaMemcpyHostToDevice, stream_));
    if (c.local_rope_theta > 0) {  // Gemma 3's sliding layers
      bf.host_rope_cos_local.assign(n, 0.0f);
      bf.host_rope_sin_local.assign(n, 0.0f);
      kernels::cpu::rope_tables(
          bf.host_rope_cos_local.data(), bf.host_rope_sin_local.data(),
          kernels::cpu::rope_inv_freq(D, c.local_rope_theta, c.local_rope_scaling, T), T,
          c.local_rope_scaling.attention_factor);
      CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(bf.rope_cos_local, bf.host_rope_cos_local.data(),
                                          n * sizeof(float), cudaMemcpyHostToDevice, stream_));
      CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(bf.rope_sin_local, bf.host_rope_sin_local.data(),
                                          n * sizeof(float), cudaMemcpyHostToDevice, stream_));
    }
  }
}

void CudaTransformer::upload_batch(const int32_t* tokens, const int32_t* targets) {
  Buffers& bf = *buffers_;
  const int64_t N = B_ * T_;
  // Why: the previous batch's copies read the staging vectors when the stream runs them (pinned
  // semantics); they ran long ago unless the last forward had no targets (then no sync followed).
  CUDA_ABORT_IF_ERROR(cudaEventSynchronize(bf.upload_done.get()));
  bf.host_tokens.assign(tokens, tokens + N);
  if (targets) {
    bf.host_targets.assign(targets, targets + N);
  } else {
    bf.host_targets.assign(static_cast<size_t>(N), kernels::cpu::kIgnoreIndex);
  }
  const size_t bytes = static_cast<size_t>(N) * sizeof(int32_t);
  // Pageable staging: a GPU driver may wait for the stream before staging these copies (so the
  // host does not run ahead of the previous micro-step's backward); pinned staging (cudaHostAlloc)
  // is the follow-up once the emulator has pinned memory.
  CUDA_ABORT_IF_ERROR(
      cudaMemcpyAsync(bf.tokens, bf.host_tokens.data(), bytes, cudaMemcpyHostToDevice, stream_));
  CUDA_ABORT_IF_ERROR(
      cudaMemcpyAsync(bf.targets, bf.host_targets.data(), bytes, cudaMemcpyHostToDevice, stream_));
  bf.upload_done.record(stream_);
  counted_targets_ = 0;
  for (int32_t t : bf.host_targets) counted_targets_ += (t != kernels::cpu::kIgnoreIndex);
}

float CudaTransformer::forward(ParamAccess& params, const int32_t* tokens, const int32_t* targets,
                               int64_t B, int64_t T) {
  const ModelConfig& c = layout_.config();
  ZERO_CHECK(T >= 1 && (c.arch != Arch::kGpt2 || T <= c.max_position_embeddings),
             "sequence length ", T, " exceeds max_position_embeddings ", c.max_position_embeddings);
  Buffers& bf = *buffers_;
  const int64_t N = B * T, V = c.vocab_size;

  // Embedding unit (its dtype, the model's, sizes the slab).
  const int emb = layout_.embedding_unit();
  {
    AcquiredDeviceUnit w(params, emb, layout_.unit(emb), bf.widened_embedding, stream_);
    ensure_buffers(B, T, w->dtype);
    upload_batch(tokens, targets);
    CudaHostCheckpoints* host = bf.host_checkpoints.get();
    if (host != nullptr) host->await_copies(0, stream_);
    embed_forward(residual_at(0), bf.tokens, *w, B, T, /*first_position=*/0, stream_);
    if (host != nullptr) host->save(0, stream_);
  }

  // Blocks. With host checkpoints, block l's output overwrites the ring slot of block l - 1's
  // input once that input's copy out has run, and is copied out as soon as it is enqueued.
  for (int l = 0; l < c.num_layers; ++l) {
    const int unit = layout_.block_unit(l);
    AcquiredDeviceUnit w(params, unit, layout_.unit(unit), bf.widened_unit, stream_);
    check_dtype(*w);
    BlockActs& a = bf.acts[options_.activation_checkpointing ? 0 : static_cast<size_t>(l)];
    CudaHostCheckpoints* host = l + 1 < c.num_layers ? bf.host_checkpoints.get() : nullptr;
    if (host != nullptr) host->await_copies(l + 1, stream_);
    block_forward(l, *w, residual_at(l), residual_at(l + 1), a);
    if (host != nullptr) host->save(l + 1, stream_);
  }

  // Final norm + head (the tied head reads the embedding unit).
  const int fin = layout_.final_unit();
  const UnitSpec& fu = layout_.unit(fin);
  AcquiredDeviceUnit fw(params, fin, fu, bf.widened_unit, stream_);
  check_dtype(*fw);
  final_norm_forward(bf.final_norm, bf.final_mean, bf.final_rstd, residual_at(c.num_layers), *fw, N,
                     stream_);
  if (fu.find(ParamKind::kLmHead) != nullptr) {
    head_forward(bf.logits, bf.logits_ld, bf.final_norm, *fw, ParamKind::kLmHead, N);
  } else {
    AcquiredDeviceUnit ew(params, emb, layout_.unit(emb), bf.widened_embedding, stream_);
    head_forward(bf.logits, bf.logits_ld, bf.final_norm, *ew, ParamKind::kTokenEmbedding, N);
  }
  fw.release();

  if (!targets) return 0.0f;
  kc::cross_entropy_forward<float>(bf.losses, bf.logits, bf.logits_ld, bf.targets, N, V, stream_);
  cuda_glue::sum_to_f64(bf.loss_sum, bf.losses, N, stream_);
  CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(&bf.host_loss_sum, bf.loss_sum, sizeof(double),
                                      cudaMemcpyDeviceToHost, stream_));
  // Why: forward returns the loss as a host float (Model's contract: the engine logs it and checks
  // it per micro-step); this is the one host sync of a micro-step.
  CUDA_ABORT_IF_ERROR(cudaStreamSynchronize(stream_));
  return counted_targets_ > 0
             ? static_cast<float>(bf.host_loss_sum / static_cast<double>(counted_targets_))
             : 0.0f;
}

void CudaTransformer::backward(ParamAccess& params, GradSink& grads, float dloss_per_token) {
  const ModelConfig& c = layout_.config();
  Buffers& bf = *buffers_;
  const int64_t B = B_, T = T_, N = B * T, C = c.hidden_size, V = c.vocab_size;
  ZERO_CHECK(N > 0, "backward called before forward");
  const size_t nc_bytes = static_cast<size_t>(N * C) * sizeof(float);

  // Loss -> logits -> the head (head_backward).
  cuda_glue::fill(bf.dloss, dloss_per_token, N, stream_);

  // Final unit: head then norm.
  const int emb = layout_.embedding_unit();
  const int fin = layout_.final_unit();
  const UnitSpec& fu = layout_.unit(fin);
  AcquiredDeviceUnit fw(params, fin, fu, bf.widened_unit, stream_);
  check_dtype(*fw);
  float* fdw = grads.grad_buffer(fin);
  float* dnorm = bf.dresidual_b;  // overwritten by head_backward
  if (const ParamSpec* lm = fu.find(ParamKind::kLmHead)) {
    head_backward(dnorm, fdw + lm->offset, *fw, ParamKind::kLmHead);
  } else {
    const UnitSpec& eu = layout_.unit(emb);
    AcquiredDeviceUnit ew(params, emb, eu, bf.widened_embedding, stream_);
    check_dtype(*ew);
    const int64_t off = eu.param(ParamKind::kTokenEmbedding).offset;
    head_backward(dnorm, grads.grad_buffer(emb) + off, *ew, ParamKind::kTokenEmbedding);
  }
  float* dx = bf.dresidual_a;
  CUDA_ABORT_IF_ERROR(cudaMemsetAsync(dx, 0, nc_bytes, stream_));
  const float* xL = residual_at(c.num_layers);
  const int64_t wn = fu.param(ParamKind::kFinalNormWeight).offset;
  if (c.arch == Arch::kGpt2) {
    const int64_t bn = fu.param(ParamKind::kFinalNormBias).offset;
    kc::layernorm_backward<float>(
        dx, fdw + wn, fdw + bn, dnorm, xL, fw->f32(ParamKind::kFinalNormWeight), bf.final_mean,
        bf.final_rstd, N, C, bf.kernel_scratch, bf.kernel_scratch_bytes, stream_);
  } else {
    kc::rmsnorm_backward<float>(dx, fdw + wn, dnorm, xL,
                                norm_weight(fw->f32(ParamKind::kFinalNormWeight), C), bf.final_rstd,
                                N, C, bf.kernel_scratch, bf.kernel_scratch_bytes, stream_);
  }
  fw.release();
  grads.grad_ready(fin);

  // Blocks in reverse; dout lives in `dx`, the block turns it into d(input) in place.
  // With host checkpoints, block l's input is copied back while block l + 1 runs: fetch(l - 1)
  // is queued before block l's kernels, into the slot block l + 1 used.
  float* dnext = bf.dresidual_b;
  CudaHostCheckpoints* host = bf.host_checkpoints.get();
  if (host != nullptr) host->fetch(static_cast<int>(c.num_layers) - 1, stream_);
  for (int l = static_cast<int>(c.num_layers) - 1; l >= 0; --l) {
    const int unit = layout_.block_unit(l);
    const UnitSpec& u = layout_.unit(unit);
    AcquiredDeviceUnit w(params, unit, u, bf.widened_unit, stream_);
    check_dtype(*w);
    float* dw = grads.grad_buffer(unit);
    BlockActs& a = bf.acts[options_.activation_checkpointing ? 0 : static_cast<size_t>(l)];
    if (host != nullptr) {
      host->await_copies(l, stream_);
      if (l > 0) host->fetch(l - 1, stream_);
    }
    const float* x = residual_at(l);
    if (options_.activation_checkpointing) {
      // Recompute this block's activations from its saved input; the output goes to scratch.
      block_forward(l, *w, x, dnext, a);
    }
    if (c.arch == Arch::kGpt2) {
      gpt2_block_backward(*w, dw, x, dx, a);
    } else if (c.post_norms) {
      gemma_block_backward(*w, dw, x, dx, a);
    } else {
      llama_block_backward(*w, dw, x, dx, a);
    }
    w.release();
    grads.grad_ready(unit);
  }

  // Embedding unit.
  {
    const UnitSpec& u = layout_.unit(emb);
    float* dw = grads.grad_buffer(emb);
    const ParamSpec* wpe = u.find(ParamKind::kPositionEmbedding);
    // Gemma: d(wte) gets the scaled gradient (dx is dead after this).
    if (c.embedding_scale != 1.0f) kc::scale<float>(dx, c.embedding_scale, N * C, stream_);
    kc::encoder_backward<float>(dw + u.param(ParamKind::kTokenEmbedding).offset,
                                wpe ? dw + wpe->offset : nullptr, dx, bf.tokens, B, T, C, V,
                                bf.kernel_scratch, bf.kernel_scratch_bytes, stream_);
    grads.grad_ready(emb);
  }
}

void CudaTransformer::logits_at(int64_t b, int64_t t, float* out) const {
  const int64_t V = layout_.config().vocab_size;
  CUDA_ABORT_IF_ERROR(cudaMemcpyAsync(out, buffers_->logits + (b * T_ + t) * buffers_->logits_ld,
                                      static_cast<size_t>(V) * sizeof(float),
                                      cudaMemcpyDeviceToHost, stream_));
  // Why: the caller reads `out` on return.
  CUDA_ABORT_IF_ERROR(cudaStreamSynchronize(stream_));
}

void CudaTransformer::check_dtype(const DeviceUnit& w) const {
  ZERO_CHECK(w.dtype == dtype_, "unit ", w.spec->name, " is ", dtype_name(w.dtype),
             " but the embedding unit was ", dtype_name(dtype_));
}

// Training's attention: causal within each of the B_ sequences of T_ rows, keeping the logsumexp
// (B, Hq, T) the backward recomputes the probabilities from; in the model's working dtype
// (attention_forward).
class CudaTransformer::BatchAttention final : public CudaBlockAttention {
 public:
  BatchAttention(CudaTransformer& model, float* lse) : model_(model), lse_(lse) {}
  void forward(int layer, const float* q, const float* k, const float* v, float* y) override {
    const ModelConfig& c = model_.layout_.config();
    model_.attention_forward(layer, y, lse_, q, k, v, c.num_heads, c.num_kv_heads);
  }

 private:
  CudaTransformer& model_;
  float* lse_;
};

const float* CudaTransformer::norm_weight(const float* w, int64_t n) const {
  const ModelConfig& c = layout_.config();
  if (c.norm_weight_offset == 0) return w;
  const int64_t most = std::max(c.hidden_size, c.head_dim());
  ZERO_CHECK(n <= most, "norm_weight: ", n, " weights, room for ", most);
  float* out = reinterpret_cast<float*>(
      buffers_->norm_weights.ensure(static_cast<size_t>(most) * sizeof(float)));
  cuda_glue::add_scalar(out, w, static_cast<float>(c.norm_weight_offset), n, stream_);
  return out;
}

void CudaTransformer::block_forward(int layer, const DeviceUnit& w, const float* x, float* out,
                                    BlockActs& a) {
  ZERO_CHECK(w.spec == &layout_.unit(layout_.block_unit(layer)), "block ", layer,
             " got another unit");
  const Buffers& bf = *buffers_;
  const CudaForwardContext ctx{.config = layout_.config(),
                               .B = B_,
                               .T = T_,
                               .rope_cos = bf.rope_cos,
                               .rope_sin = bf.rope_sin,
                               .rope_cos_local = bf.rope_cos_local,
                               .rope_sin_local = bf.rope_sin_local,
                               .x16 = bf.x16};
  BatchAttention attention(*this, a.lse);
  block_forward(ctx, w, x, out, a, attention);
}

void CudaTransformer::block_forward(const CudaForwardContext& ctx, const DeviceUnit& w,
                                    const float* x, float* out, BlockActs& a,
                                    CudaBlockAttention& attention) {
  if (ctx.config.arch == Arch::kGpt2) {
    gpt2_block_forward(ctx, w, x, out, a, attention);
  } else if (ctx.config.post_norms) {
    gemma_block_forward(ctx, w, x, out, a, attention);
  } else {
    llama_block_forward(ctx, w, x, out, a, attention);
  }
}

}  // namespace zero::model
