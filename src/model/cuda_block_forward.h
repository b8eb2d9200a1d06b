// What the CUDA model's block forward (CudaTransformer::block_forward, cuda_transformer_blocks.cc)
// shares between training (CudaTransformer::forward) and KV-cached decoding (CudaKvDecoder): the
// shape and positions of the rows being run, and attention, the one piece that differs, as
// block_forward.h does for the CPU model. Legend: N = B*T rows, Hq / Hkv heads, D head dim.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "model/model_config.h"

namespace zero::model {

// B sequences of T rows each; Llama's RoPE tables start at the rows' first position (training:
// position 0; decoding: the cached length), so row t of a sequence reads row t of the tables.
struct CudaForwardContext {
  const ModelConfig& config;
  int64_t B = 1, T = 1;
  const float* rope_cos = nullptr;  // Llama: (T, D/2) device rows
  const float* rope_sin = nullptr;
  // Gemma 3: the sliding layers' own tables (ModelConfig::uses_local_rope), the same rows.
  const float* rope_cos_local = nullptr;
  const float* rope_sin_local = nullptr;
  // A 16-bit model's GEMM operand copies: room for N rows of the widest dense-layer input, rows
  // padded to 8 elements (CudaTransformer::dense_forward); unused for fp32.
  void* x16 = nullptr;
};

// Causal attention of the rows being run. Training attends within each sequence and keeps what its
// backward needs; decoding appends k and v to its cache and attends over every cached position.
class CudaBlockAttention {
 public:
  // y (N, Hq*D) = attention of q (N, Hq*D) over k, v (N, Hkv*D) of these rows and any earlier
  // positions the implementation holds, enqueued on the model's stream. Llama's q and k are
  // already rotated.
  virtual void forward(int layer, const float* q, const float* k, const float* v, float* y) = 0;

 protected:
  ~CudaBlockAttention() = default;
};

}  // namespace zero::model
