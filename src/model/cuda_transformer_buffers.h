// CudaTransformer's device state (private to cuda_transformer.cc and cuda_transformer_blocks.cc):
// the activation slab's arrays, the per-block saved activations, a 16-bit model's GEMM operand
// copies and its widened small parameters.
// Legend: N = B*T rows, C hidden, F intermediate, V vocab, Hq / Hkv heads, D head dim.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "core/cuda/device_alloc.h"
#include "kernels/elementwise/elementwise_cuda.h"
#include "kernels/matmul/matmul_cuda.h"
#include "model/cuda_host_checkpoints.h"
#include "model/cuda_transformer.h"
#include "model/cuda_transformer_kernels.h"

namespace zero::model {

// Saved forward activations of one block (device pointers into the slab). GPT-2 packs q/k/v into
// one projection (qkv); Llama rotates q, k (q_rot, k_rot). Attention keeps its logsumexp (lse)
// instead of Transformer's probabilities: the CUDA backward recomputes them.
struct CudaTransformer::BlockActs {
  float *norm1, *mean1, *rstd1;  // (N, C), (N), (N)
  float* qkv;                    // GPT-2 (N, 3C)
  float *q, *k, *v;              // (N, Hq*D), (N, Hkv*D), (N, Hkv*D)
  float *q_rot, *k_rot;          // Llama, after RoPE (Qwen3: after q_norm / k_norm, then RoPE)
  float* q_rstd = nullptr;       // Qwen3 (N*Hq) q_norm statistics, one per row and head
  float* k_rstd = nullptr;       // Qwen3 (N*Hkv)
  // Gemma 3 (post_norms): the attention and MLP outputs before their post-norms, those norms'
  // statistics, and gelu(gate).
  float* attn_out = nullptr;        // (N, C)
  float* rstd_post_attn = nullptr;  // (N)
  float* mlp_out = nullptr;         // (N, C)
  float* rstd_post_mlp = nullptr;   // (N)
  float* gate_act = nullptr;        // (N, F)
  float* lse;                       // (B, Hq, T)
  float* attn_y;                    // (N, Hq*D) attention output before the output projection
  float* x2;                        // (N, C) residual after attention
  float *norm2, *mean2, *rstd2;     // (N, C), (N), (N)
  float* gate;                      // Llama (N, F)
  float* up;                        // (N, F)
  float* act;                       // (N, F) gelu(up) / silu(gate) * up
  // 16-bit models: the GEMM inputs' 16-bit copies (norm1, attn_y, norm2, act; rows padded to 8
  // elements), made once in the forward and read again by the backward's weight gradients (as
  // autocast saves them). Null (the KV decoder): cast into the context's x16 scratch instead.
  void* norm1_16 = nullptr;
  void* attn_y16 = nullptr;
  void* norm2_16 = nullptr;
  void* act16 = nullptr;
};

// Whether a 16-bit model reads parameter `kind` as stored in its unit: the GEMM weights (16-bit
// GEMM operands) and the embedding tables (embed_16 widens the rows it reads). The others, the
// norm weights and the biases, are widened into fp32 (DeviceWiden).
inline bool read_in_unit_dtype(ParamKind kind) { return is_matrix_or_embedding(kind); }

// Elements of unit `u` a 16-bit model widens (its parameters not read_in_unit_dtype).
inline int64_t widened_numel(const UnitSpec& u) {
  int64_t n = 0;
  for (const ParamSpec& p : u.params) n += read_in_unit_dtype(p.kind) ? 0 : p.numel();
  return n;
}

// One acquired unit as the kernels read it. fp32 model: every parameter at its offset in the
// unit's own memory. 16-bit model: the GEMM weights and embeddings in the unit's own 16-bit memory
// (matrix), the small parameters (norm weights, biases) in a compact fp32 copy (f32), in unit
// order.
struct CudaTransformer::DeviceUnit {
  const UnitSpec* spec = nullptr;
  const void* data = nullptr;  // the unit as acquired
  DType dtype = DType::kF32;
  const float* widened = nullptr;  // fp32: == data; 16-bit: the compact small parameters

  // fp32 values of `kind` (fp32 model: any parameter; 16-bit: a widened one).
  const float* f32(ParamKind kind) const {
    if (dtype == DType::kF32) return static_cast<const float*>(data) + spec->param(kind).offset;
    ZERO_CHECK(!read_in_unit_dtype(kind), "parameter ", spec->param(kind).name,
               " of a 16-bit unit is not widened");
    int64_t offset = 0;
    for (const ParamSpec& p : spec->params) {
      if (p.kind == kind) return widened + offset;
      if (!read_in_unit_dtype(p.kind)) offset += p.numel();
    }
    ZERO_CHECK(false, "unit ", spec->name, " has no such parameter");
    return nullptr;
  }
  // f32(kind), or null when the unit has no such parameter (optional biases).
  const float* f32_opt(ParamKind kind) const {
    return spec->find(kind) != nullptr ? f32(kind) : nullptr;
  }
  // `kind`'s values as stored in the unit (fp32 or 16-bit).
  const void* stored(ParamKind kind) const {
    return static_cast<const char*>(data) +
           spec->param(kind).offset * static_cast<int64_t>(dtype_bytes(dtype));
  }
  const void* stored_opt(ParamKind kind) const {
    return spec->find(kind) != nullptr ? stored(kind) : nullptr;
  }
};

// The fp32 copies of a 16-bit unit's small parameters (read_in_unit_dtype false), in model-owned
// device memory grown to the largest such set held.
class CudaTransformer::DeviceWiden {
 public:
  DeviceWiden() = default;
  ~DeviceWiden() {
    if (values_ != nullptr) cudaFree(values_);
  }
  DeviceWiden(const DeviceWiden&) = delete;
  DeviceWiden& operator=(const DeviceWiden&) = delete;

  // `view` (unit `u`) as the kernels read it; for a 16-bit unit the small parameters' cast is
  // enqueued on `stream` (exact).
  DeviceUnit widen(const ParamView& view, const UnitSpec& u, cudaStream_t stream) {
    ZERO_CHECK(view.device == Device::kCuda, "the CUDA model got parameters in host memory");
    DeviceUnit unit{.spec = &u, .data = view.data, .dtype = view.dtype};
    if (view.dtype == DType::kF32) {
      unit.widened = static_cast<const float*>(view.data);
      return unit;
    }
    ZERO_CHECK(view.dtype == DType::kBF16 || view.dtype == DType::kF16,
               "unsupported parameter dtype");
    const int64_t numel = widened_numel(u);
    if (numel > numel_) {
      // Why the free's device sync is harmless: it happens once per size, in the first steps.
      if (values_ != nullptr) CUDA_ABORT_IF_ERROR(cudaFree(values_));
      values_ = static_cast<float*>(zero::cuda::device_alloc_or_exit(
          {.what = "the fp32 buffer a 16-bit unit's small parameters are widened into",
           .bytes = static_cast<size_t>(numel) * sizeof(float),
           .planned_bytes = -1,
           .advice = "fewer ranks per GPU, or a GPU with more free memory"}));
      numel_ = numel;
    }
    cuda_glue::WidenSegments segments;
    int64_t offset = 0;
    for (const ParamSpec& p : u.params) {
      if (read_in_unit_dtype(p.kind)) continue;
      ZERO_CHECK(segments.count < cuda_glue::kMaxWidenSegments, "unit ", u.name, " has more than ",
                 cuda_glue::kMaxWidenSegments, " small parameters");
      segments.src_offset[segments.count] = p.offset;
      segments.dst_offset[segments.count] = offset;
      segments.numel[segments.count] = p.numel();
      ++segments.count;
      offset += p.numel();
    }
    cuda_glue::widen_segments(values_, view.data, view.dtype, segments, stream);
    unit.widened = values_;
    return unit;
  }
  int64_t bytes() const { return numel_ * static_cast<int64_t>(sizeof(float)); }

 private:
  float* values_ = nullptr;
  int64_t numel_ = 0;
};

// One allocation carved into 256-byte-aligned arrays (CudaTransformer's slab, CudaKvDecoder's
// cache): run once with a null base to size it, then again on the memory to hand out the pointers.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <typename T>
  T* take(int64_t n) {
    T* p = base_ ? reinterpret_cast<T*>(base_ + offset_) : nullptr;
    offset_ += (static_cast<size_t>(n) * sizeof(T) + 255) / 256 * 256;
    return p;
  }
  size_t bytes() const { return offset_; }

 private:
  char* base_;
  size_t offset_ = 0;
};

// Device bytes grown on demand to the largest request (attention's 16-bit copies).
class DeviceScratch {
 public:
  // `what` names it in an out-of-memory message (a string literal: not copied).
  explicit DeviceScratch(const char* what) : what_(what) {}
  ~DeviceScratch() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  char* ensure(size_t bytes) {
    if (bytes > bytes_) {
      // Why the free's device sync is harmless: it happens once per size, in the first steps.
      if (data_ != nullptr) CUDA_ABORT_IF_ERROR(cudaFree(data_));
      data_ = zero::cuda::device_alloc_or_exit(
          {.what = what_,
           .bytes = bytes,
           .planned_bytes = -1,
           .advice = "a smaller --per_device_train_batch_size or --block_size"});
      bytes_ = bytes;
    }
    return static_cast<char*>(data_);
  }
  int64_t bytes() const { return static_cast<int64_t>(bytes_); }

 private:
  const char* what_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

struct CudaTransformer::Buffers {
  std::unique_ptr<kernels::cuda::MatmulContext> matmul;
  // The slab and what is carved from it (sized for (B_, T_)).
  char* slab = nullptr;
  size_t slab_bytes = 0;
  int32_t *tokens = nullptr, *targets = nullptr;  // (N)
  // (N, C) each: L + 1, block l reads l and writes l + 1; with host checkpoints three, the two
  // ring slots of the block inputs and the last block's output (residual_at maps).
  std::vector<float*> residual;
  std::vector<BlockActs> acts;  // one per block (one shared if checkpointing)
  // Gradient scratch shared by the blocks.
  float *dnorm, *dq, *dk, *dv, *dqkv, *dattn_y, *dact, *dup, *dgate;
  float *dq_proj = nullptr, *dk_proj = nullptr;  // Qwen3: d(q), d(k) before q_norm / k_norm
  float *dpost = nullptr, *dgelu = nullptr;      // Gemma 3: (N, C) post-norm input grad, (N, F)
  float *final_norm, *final_mean, *final_rstd;   // (N, C), (N), (N)
  float* logits;  // (N, V), rows logits_ld apart; fp32: holds dlogits after backward
  int64_t logits_ld = 0;
  float *losses, *dloss;                                       // (N)
  double* loss_sum;                                            // (1)
  float *dresidual_a, *dresidual_b;                            // (N, C) ping-pong gradient buffers
  float *rope_cos, *rope_sin;                                  // Llama (T, D/2)
  float *rope_cos_local = nullptr, *rope_sin_local = nullptr;  // Gemma 3's sliding layers
  void* kernel_scratch = nullptr;  // norms', attention's and encoder's backward
  size_t kernel_scratch_bytes = 0;
  // Host staging: the batch and the tables are read by copies queued on the stream; upload_done
  // marks when the last batch copy ran.
  std::vector<int32_t> host_tokens, host_targets;
  std::vector<float> host_rope_cos, host_rope_sin, host_rope_cos_local, host_rope_sin_local;
  double host_loss_sum = 0.0;
  zero::cuda::CudaEvent upload_done;
  // 16-bit models: the GEMM operand copies (16-bit, rows padded to 8 elements = 16 bytes): a GEMM
  // input (N, round8(max in_features)) and an output gradient (N, round8(max out_features, V)).
  void* x16 = nullptr;
  void* dout16 = nullptr;
  // 16-bit models: fp32 copies of the acquired units' small parameters (the embedding has its
  // own: the tied head holds it while the final unit is held).
  DeviceWiden widened_embedding, widened_unit;
  // 16-bit models: the 16-bit copies attention runs on (CudaTransformer::attention16_bytes).
  DeviceScratch attention16{"the 16-bit copies attention runs on (q, k, v, output, gradients)"};
  // Gemma: the (1 + w) of the norm about to run (CudaTransformer::norm_weight), max(C, D) floats;
  // one suffices, each norm's kernels being queued before the next norm's weights are written.
  DeviceScratch norm_weights{"Gemma's (1 + w) norm weights"};
  // cpu_checkpointing: the block inputs' host copies and their side stream (null when off).
  std::unique_ptr<CudaHostCheckpoints> host_checkpoints;

  ~Buffers() {
    host_checkpoints.reset();  // its copies read the slab: they finish first
    if (slab != nullptr) cudaFree(slab);
  }
};

}  // namespace zero::model
