// CudaTransformer: the CUDA implementation of model::Model — Transformer's math (the CPU oracle,
// transformer.h) as calls of the CUDA kernels (kernels/<op>/<op>_cuda.h) on one compute stream,
// with every activation in device memory the model owns. GPT-2 and the Llama family, as the CPU
// model supports them. Legend: B batch, T time, C hidden, V vocab, N = B*T.
//
// Stream contract: everything is enqueued on stream(); the only host synchronisations are the
// loss of a forward with targets and logits_at. So ParamAccess::release(u) and GradSink::grad_ready
// (u) are called once the kernels that read unit u's parameters / write its gradient are ENQUEUED,
// not finished: an implementation that reuses the parameter memory or reads the gradient must
// order that after stream() (an event recorded on it).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "kernels/rounded16.h"
#include "model/cuda_block_forward.h"
#include "model/model.h"
#include "model/param_access.h"
#include "model/param_layout.h"

namespace zero::model {

struct CudaTransformerOptions {
  // Keep only each block's input (the residual stream) during forward; recompute the block in
  // backward, as Transformer does.
  bool activation_checkpointing = false;
  // activation_checkpointing.cpu_checkpointing, with activation_checkpointing: the block inputs
  // live in pinned host memory (cuda_host_checkpoints.h), the device keeps a ring of two plus the
  // last block's output. Bitwise the same results; ignored without activation_checkpointing.
  bool checkpoints_in_host_memory = false;
  // 16-bit models: the LM head's backward runs over this many rows (positions) at a time, so its
  // 16-bit gradient copy is (rows, V) rather than (N, V) (gpt2-124m at 8x1024: 206 MB instead of
  // 823 MB); each chunk adds a read and write of the fp32 head gradient (V, C). REQUIRES: > 0.
  int64_t lm_head_chunk_rows = 2048;
  // 16-bit models: the norms and the GELU / SwiGLU write the next GEMM's 16-bit input in the same
  // pass (kernels::Rounded16) instead of a separate cast that re-reads their fp32 output; bitwise
  // the same copies. Off: the separate casts (tests compare the two).
  bool fuse_16bit_copies = true;
};

class CudaKvDecoder;

class CudaTransformer final : public Model {
 public:
  // A model on the current CUDA device running on `stream` (null: the legacy default stream), which
  // must outlive it.
  // Errors: no usable device (the cuBLASLt handle cannot be created).
  static StatusOr<std::unique_ptr<CudaTransformer>> create(const ModelConfig& config,
                                                           CudaTransformerOptions options = {},
                                                           cudaStream_t stream = nullptr);
  ~CudaTransformer() override;
  CudaTransformer(const CudaTransformer&) = delete;
  CudaTransformer& operator=(const CudaTransformer&) = delete;

  const ModelLayout& layout() const override { return layout_; }
  Device device() const override { return Device::kCuda; }
  cudaStream_t stream() const { return stream_; }

  // Device bytes of the activation, gradient-scratch and kernel-scratch slab a forward/backward of
  // (B, T) allocates for a model whose parameters are `dtype` (a 16-bit model adds its GEMM
  // operand copies), for memory planning before anything is allocated (cpu_checkpointing makes it
  // smaller). Not included: the fp32 buffers a 16-bit model's small parameters are widened into
  // (widen_bytes) and the MatmulContext's workspace
  // (kernels::cuda::MatmulContext::kWorkspaceBytes). REQUIRES: a current device.
  static int64_t activation_bytes(const ModelConfig& config, const CudaTransformerOptions& options,
                                  int64_t B, int64_t T, DType dtype = DType::kF32);
  // Device bytes of the fp32 buffers a `dtype` model widens its units' small parameters (norm
  // weights, biases) into (0 for fp32; GEMM weights and embeddings are read as stored): the
  // embedding unit's own and one grown to the largest other unit's.
  static int64_t widen_bytes(const ModelConfig& config, DType dtype);
  // Device bytes of the 16-bit copies attention runs on in a bf16 / fp16 model (0 for fp32): q, k,
  // v, the output and, in the backward, its gradient and dq, dk, dv (grown on first use).
  static int64_t attention16_bytes(const ModelConfig& config, DType dtype, int64_t B, int64_t T);
  // Pinned host bytes of the block inputs under cpu_checkpointing (0 when it is off).
  static int64_t host_checkpoint_bytes(const ModelConfig& config,
                                       const CudaTransformerOptions& options, int64_t B, int64_t T);
  // Device bytes of the slab the last forward allocated (activation_bytes of its shape and dtype; 0
  // before the first), plus the fp32 buffers 16-bit units' small parameters were widened into
  // (widen_bytes once every unit was acquired) and attention's 16-bit copies (attention16_bytes
  // after a backward).
  int64_t buffer_bytes() const override;

  // As Transformer::forward. Tokens and targets are host arrays (copied to the device); the
  // parameters acquired must be device memory (ParamView::device == kCuda), all of one dtype. With
  // targets, waits for the stream to return the loss.
  // Precision: fp32 units run everything in fp32. bf16 / fp16 units run like torch.autocast: every
  // GEMM (dense layers, LM head) takes 16-bit operands — the weights as stored, the activations and
  // output gradients rounded to the dtype — with fp32 accumulation and fp32 outputs, and attention
  // runs on 16-bit copies of q, k, v (attention_forward); norms, activations, residuals, the loss
  // and all gradients stay fp32.
  float forward(ParamAccess& params, const int32_t* tokens, const int32_t* targets, int64_t B,
                int64_t T) override;
  int64_t counted_targets() const override { return counted_targets_; }
  // As Transformer::backward; the GradSink's buffers are device fp32 memory, accumulated into.
  void backward(ParamAccess& params, GradSink& grads, float dloss_per_token) override;
  // Copies the logits of (b, t) to host `out` (V floats) and waits for them. Invalidated by
  // backward (the logits buffer becomes their gradient, as in Transformer).
  void logits_at(int64_t b, int64_t t, float* out) const override;

 private:
  // KV-cached decoding runs this model's block forward (block_forward below) over its cache, with
  // the model's matmul context and widen buffers.
  friend class CudaKvDecoder;
  struct Buffers;
  struct BlockActs;
  struct DeviceUnit;
  class DeviceWiden;
  class AcquiredDeviceUnit;
  class BatchAttention;

  CudaTransformer(const ModelConfig& config, CudaTransformerOptions options, cudaStream_t stream);
  // Points bf's arrays into the slab at `base` (null: only sizes it); returns the slab's bytes.
  static size_t carve_slab(const ModelConfig& config, const CudaTransformerOptions& options,
                           int64_t B, int64_t T, DType dtype, Buffers& bf, char* base);
  // carve_slab's per-block arrays of Qwen3's q_norm / k_norm and Gemma 3's post-norms and GeGLU,
  // N rows each, from `take` (n floats).
  static void carve_family_arrays(const ModelConfig& config, int64_t N, BlockActs& a,
                                  const std::function<float*(int64_t)>& take);
  void ensure_buffers(int64_t B, int64_t T, DType dtype);
  // Block inputs live in host memory (cpu_checkpointing with activation checkpointing).
  static bool host_checkpointing(const CudaTransformerOptions& options) {
    return options.activation_checkpointing && options.checkpoints_in_host_memory;
  }
  // The residual stream entering block l (l == num_layers: the last block's output), in the slab
  // or, with host checkpoints, in its ring slot.
  float* residual_at(int64_t l) const;
  void upload_batch(const int32_t* tokens, const int32_t* targets);
  // Training's block forward: the batch's (B_, T_) rows from position 0, attention within each
  // sequence keeping its logsumexp for backward.
  void block_forward(int layer, const DeviceUnit& w, const float* x, float* out, BlockActs& a);
  // out (N, C) = block w over x (N, C), the math training and decoding share (the CPU model's
  // block_forward.h twin); a's arrays hold N = ctx.B * ctx.T rows (lse is attention's business).
  void block_forward(const CudaForwardContext& ctx, const DeviceUnit& w, const float* x, float* out,
                     BlockActs& a, CudaBlockAttention& attention);
  void gpt2_block_forward(const CudaForwardContext& ctx, const DeviceUnit& w, const float* x,
                          float* out, BlockActs& a, CudaBlockAttention& attention);
  void llama_block_forward(const CudaForwardContext& ctx, const DeviceUnit& w, const float* x,
                           float* out, BlockActs& a, CudaBlockAttention& attention);
  // Causal attention of block `layer` on fp32 (N, H*D) arrays in the working dtype: an fp32 model
  // runs the fp32 kernel on them; a bf16 / fp16 one the tensor-core kernel on 16-bit copies of
  // q, k, v (and of dout), as torch.autocast's SDPA sees them, widened back into y (or dq, dk,
  // dv, which the 16-bit gradients overwrite: callers pass them zeroed).
  void attention_forward(int layer, float* y, float* lse, const float* q, const float* k,
                         const float* v, int64_t Hq, int64_t Hkv);
  void attention_backward(int layer, float* dq, float* dk, float* dv, const float* dy,
                          const float* y, const float* lse, const float* q, const float* k,
                          const float* v, int64_t Hq, int64_t Hkv);
  void gpt2_block_backward(const DeviceUnit& w, float* dw, const float* x, float* dx, BlockActs& a);
  // Gemma 3 (cuda_gemma_block.cc).
  void gemma_block_forward(const CudaForwardContext& ctx, const DeviceUnit& w, const float* x,
                           float* out, BlockActs& a, CudaBlockAttention& attention);
  void gemma_block_backward(const DeviceUnit& w, float* dw, const float* x, float* dx,
                            BlockActs& a);
  // The weights an RMSNorm multiplies by: w itself, or Gemma's (1 + w) written into
  // Buffers::norm_weights (valid until the next call; n <= max(C, D)).
  const float* norm_weight(const float* w, int64_t n) const;
  void llama_block_backward(const DeviceUnit& w, float* dw, const float* x, float* dx,
                            BlockActs& a);
  // ZERO_CHECK: unit w has the dtype the slab was carved for (all units share one).
  void check_dtype(const DeviceUnit& w) const;
  // A 16-bit unit with CudaTransformerOptions::fuse_16bit_copies: the GEMM inputs' 16-bit copies
  // are written by their producers (the norms, GELU / SwiGLU), the GEMMs told they are ready.
  bool fuse_16bit_copies(const DeviceUnit& w) const;
  // The copy a producer writes into `inp16` for a GEMM reading `width` columns of unit w's dtype
  // (rows padded to 8 elements, as dense_forward's cast writes them).
  static kernels::Rounded16 rounded16(const DeviceUnit& w, void* inp16, int64_t width);
  // The dense layer with weight `weight` of unit w (matmul.h's contract: out overwritten; dinp,
  // dweight, dbias accumulated, any may be null; bias may be null): fp32 GEMMs for an fp32 unit,
  // 16-bit operands (inp and dout rounded into x16 / dout16) with fp32 outputs for a 16-bit one.
  // inp16: room for inp's 16-bit copy (BlockActs' saved copies, CudaForwardContext::x16); null:
  // the slab's x16. inp16_ready: it holds inp's copy already (a second GEMM on the same input).
  void dense_forward(float* out, const float* inp, const DeviceUnit& w, ParamKind weight,
                     const float* bias, int64_t N, int64_t C, int64_t OC, void* inp16 = nullptr,
                     bool inp16_ready = false);
  // inp16_saved: inp's 16-bit copy (rows padded to 8) made in the forward, for the weight
  // gradient; null: inp is rounded again into the slab's x16. accumulate_dinp false: dinp is
  // overwritten (the first product into a gradient scratch, which then needs no zeroing).
  void dense_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                      const float* inp, const DeviceUnit& w, ParamKind weight, int64_t N, int64_t C,
                      int64_t OC, const void* inp16_saved = nullptr, bool accumulate_dinp = true);
  // logits (N, V), rows logits_ld apart (logits_row_stride) = norm (N, C) · W^T for the LM head
  // weight `weight` of unit w, (V, C). 16-bit: the vocabulary split at V rounded down to 8, so
  // that the large GEMM has every extent and row stride a multiple of 16 bytes (what cuBLASLt's
  // fast kernels need: GPT-2's V = 50257 otherwise takes align1 kernels, a fifth of an H200 step),
  // and the < 8 rows left their own small GEMM. inp16: as dense_forward. Gemma 2
  // (final_logit_softcapping): then logits = cap * tanh(logits / cap), training's and decoding's.
  // The embedding, training's and decoding's: x (B*T, C) fp32 = token rows of embedding unit w
  // plus, for GPT-2, position rows from `first_position` (decoding appends after its cache), read
  // in w's dtype.
  void embed_forward(float* x, const int32_t* tokens, const DeviceUnit& w, int64_t B, int64_t T,
                     int64_t first_position, cudaStream_t s) const;
  // The final norm of `rows` rows of x with final unit fw's weights (LayerNorm for GPT-2 keeping
  // mean and rstd, RMSNorm for the Llama family keeping rstd; mean unused then).
  void final_norm_forward(float* norm, float* mean, float* rstd, const float* x,
                          const DeviceUnit& fw, int64_t rows, cudaStream_t s) const;
  void head_forward(float* logits, int64_t logits_ld, const float* norm, const DeviceUnit& w,
                    ParamKind weight, int64_t N, void* inp16 = nullptr);
  // The loss's gradient through the LM head (weight `weight` of unit w, (V, C)): dlogits (N, V) =
  // the cross-entropy gradient of the logits scaled by dloss, then dnorm (N, C) = dlogits · W and
  // dweight (V, C) += dlogits^T · final_norm. fp32: dlogits overwrite the logits (in place), one
  // dense_backward. 16-bit: in chunks of lm_head_rows rows, the gradient is written already
  // rounded into dout16 (the same values dense_backward's cast gives) and the logits are kept.
  // Gemma 2: the gradient of the uncapped logits (times tanh's slope, from the capped ones).
  void head_backward(float* dnorm, float* dweight, const DeviceUnit& w, ParamKind weight);
  // Row stride of the logits: V for fp32 (the in-place gradient keeps dense rows), V rounded up
  // to 8 for a 16-bit model (16-byte aligned rows for the GEMM that writes them).
  static int64_t logits_row_stride(DType dtype, int64_t V);
  // Rows per chunk of a 16-bit model's head backward at N rows.
  static int64_t lm_head_rows(const CudaTransformerOptions& options, int64_t N);

  ModelLayout layout_;
  CudaTransformerOptions options_;
  cudaStream_t stream_;
  std::unique_ptr<Buffers> buffers_;
  int64_t B_ = 0, T_ = 0;
  DType dtype_ = DType::kF32;  // of the parameters the slab was carved for
  int64_t counted_targets_ = 0;
};

}  // namespace zero::model
