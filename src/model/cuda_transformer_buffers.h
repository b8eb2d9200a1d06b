// CudaTransformer's device state (private to cuda_transformer.cc and cuda_transformer_blocks.cc):
// the activation slab's arrays, the per-block saved activations and the widened 16-bit units.
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
#include "kernels/elementwise/elementwise_cuda.h"
#include "kernels/matmul/matmul_cuda.h"
#include "model/cuda_host_checkpoints.h"
#include "model/cuda_transformer.h"

namespace zero::model {

// Saved forward activations of one block (device pointers into the slab). GPT-2 packs q/k/v into
// one projection (qkv); Llama rotates q, k (q_rot, k_rot). Attention keeps its logsumexp (lse)
// instead of Transformer's probabilities: the CUDA backward recomputes them.
struct CudaTransformer::BlockActs {
  float *norm1, *mean1, *rstd1;  // (N, C), (N), (N)
  float* qkv;                    // GPT-2 (N, 3C)
  float *q, *k, *v;              // (N, Hq*D), (N, Hkv*D), (N, Hkv*D)
  float *q_rot, *k_rot;          // Llama, after RoPE
  float* lse;                    // (B, Hq, T)
  float* attn_y;                 // (N, Hq*D) attention output before the output projection
  float* x2;                     // (N, C) residual after attention
  float *norm2, *mean2, *rstd2;  // (N, C), (N), (N)
  float* gate;                   // Llama (N, F)
  float* up;                     // (N, F)
  float* act;                    // (N, F) gelu(up) / silu(gate) * up
};

// A 16-bit unit widened into model-owned fp32 device memory (grown to the largest unit held).
class CudaTransformer::DeviceWiden {
 public:
  DeviceWiden() = default;
  ~DeviceWiden() {
    if (values_ != nullptr) cudaFree(values_);
  }
  DeviceWiden(const DeviceWiden&) = delete;
  DeviceWiden& operator=(const DeviceWiden&) = delete;

  // fp32 values of `view`: its own memory when fp32, else this buffer (the cast enqueued on
  // `stream`; exact for bf16 / fp16).
  const float* widen(const ParamView& view, cudaStream_t stream) {
    ZERO_CHECK(view.device == Device::kCuda, "the CUDA model got parameters in host memory");
    if (view.dtype == DType::kF32) return static_cast<const float*>(view.data);
    if (view.numel > numel_) {
      // Why the free's device sync is harmless: it happens once per size, in the first steps.
      if (values_ != nullptr) CUDA_ABORT_IF_ERROR(cudaFree(values_));
      CUDA_ABORT_IF_ERROR(cudaMalloc(&values_, static_cast<size_t>(view.numel) * sizeof(float)));
      numel_ = view.numel;
    }
    if (view.dtype == DType::kBF16) {
      kernels::cuda::cast(static_cast<const __nv_bfloat16*>(view.data), values_, view.numel,
                          stream);
    } else {
      ZERO_CHECK(view.dtype == DType::kF16, "unsupported parameter dtype");
      kernels::cuda::cast(static_cast<const __half*>(view.data), values_, view.numel, stream);
    }
    return values_;
  }
  int64_t bytes() const { return numel_ * static_cast<int64_t>(sizeof(float)); }

 private:
  float* values_ = nullptr;
  int64_t numel_ = 0;
};

// Device bytes grown on demand to the largest request (attention's 16-bit copies).
class DeviceScratch {
 public:
  DeviceScratch() = default;
  ~DeviceScratch() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  char* ensure(size_t bytes) {
    if (bytes > bytes_) {
      // Why the free's device sync is harmless: it happens once per size, in the first steps.
      if (data_ != nullptr) CUDA_ABORT_IF_ERROR(cudaFree(data_));
      CUDA_ABORT_IF_ERROR(cudaMalloc(&data_, bytes));
      bytes_ = bytes;
    }
    return static_cast<char*>(data_);
  }
  int64_t bytes() const { return static_cast<int64_t>(bytes_); }

 private:
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
  float *final_norm, *final_mean, *final_rstd;  // (N, C), (N), (N)
  float* logits;                                // (N, V); holds dlogits after backward
  float *losses, *dloss;                        // (N)
  double* loss_sum;                             // (1)
  float *dresidual_a, *dresidual_b;             // (N, C) ping-pong gradient buffers
  float *rope_cos, *rope_sin;                   // Llama (T, D/2)
  void* kernel_scratch = nullptr;               // norms', attention's and encoder's backward
  size_t kernel_scratch_bytes = 0;
  // Host staging: the batch and the tables are read by copies queued on the stream; upload_done
  // marks when the last batch copy ran.
  std::vector<int32_t> host_tokens, host_targets;
  std::vector<float> host_rope_cos, host_rope_sin;
  double host_loss_sum = 0.0;
  zero::cuda::CudaEvent upload_done;
  // 16-bit models: fp32 copies of the acquired units (the embedding has its own: the tied head
  // holds it while the final unit is held).
  DeviceWiden widened_embedding, widened_unit;
  // 16-bit models: the 16-bit copies attention runs on (CudaTransformer::attention16_bytes).
  DeviceScratch attention16;
  // The dtype of the block unit being run (its attention runs in it).
  DType block_dtype = DType::kF32;
  // cpu_checkpointing: the block inputs' host copies and their side stream (null when off).
  std::unique_ptr<CudaHostCheckpoints> host_checkpoints;

  ~Buffers() {
    host_checkpoints.reset();  // its copies read the slab: they finish first
    if (slab != nullptr) cudaFree(slab);
  }
};

}  // namespace zero::model
