// Transformer: forward and backward of GPT-2 and Llama-family decoder models, written as kernel
// calls over units (embedding, blocks, final). Parameters come from a ParamAccess, gradients go to
// a GradSink. Legend: B batch, T time, C hidden, V vocab, F mlp hidden, Hq/Hkv heads, D head dim, N
// = B*T.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "model/model.h"
#include "model/param_access.h"
#include "model/param_layout.h"

namespace zero::kernels::cpu {
class Bf16Gemm;
}

namespace zero::model {

struct ForwardContext;

struct TransformerOptions {
  // Keep only each block's input during forward; recompute the block in backward.
  bool activation_checkpointing = false;
  // activation_checkpointing.cpu_checkpointing: keep those block inputs in host memory. On the CPU
  // backend every activation already is; the CUDA engine moves them to pinned host buffers.
  bool checkpoints_in_host_memory = false;
  // Dense-layer and LM-head GEMMs with bf16-rounded inputs and fp32 accumulation (oneDNN,
  // kernels/matmul/bf16_gemm.h): the engine sets it for bf16 models on CPUs with AVX512-BF16
  // unless ZERO_CPU_BF16_GEMM=0. Off: fp32 OpenBLAS GEMMs.
  bool bf16_gemm = false;
};

class Transformer final : public Model {
 public:
  Transformer(const ModelConfig& config, TransformerOptions options = {});
  ~Transformer() override;
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelLayout& layout() const override { return layout_; }
  Device device() const override { return Device::kCpu; }

  // Bytes of the activation and gradient-scratch buffers a forward/backward of (B, T) allocates
  // (what ensure_buffers creates), for memory planning before anything is allocated.
  static int64_t activation_bytes(const ModelConfig& config, const TransformerOptions& options,
                                  int64_t B, int64_t T);
  // Bytes of those buffers as allocated by the last forward (0 before the first), plus the fp32
  // buffers 16-bit units are widened into.
  int64_t buffer_bytes() const override {
    return buffer_bytes_ + widened_embedding_.bytes() + widened_unit_.bytes();
  }

  // Runs the forward pass over tokens (B, T). With targets (B, T) returns the mean token
  // cross-entropy over targets != -100 (0 if none); without, returns 0 and only computes logits.
  // REQUIRES: T <= max_position_embeddings (GPT-2), tokens in [0, V).
  float forward(ParamAccess& params, const int32_t* tokens, const int32_t* targets, int64_t B,
                int64_t T) override;
  // Number of targets counted by the last forward.
  int64_t counted_targets() const override { return counted_targets_; }
  // Logits (B, T, V) of the last forward; invalidated by backward (it reuses the buffer).
  const float* logits() const { return logits_.f32(); }
  // Backward of the last forward's loss, with d(loss)/d(token loss) = dloss_per_token for every
  // counted target (e.g. 1 / (counted tokens × micro-steps) × loss scale). Accumulates gradients.
  void backward(ParamAccess& params, GradSink& grads, float dloss_per_token) override;
  void logits_at(int64_t b, int64_t t, float* out) const override;

 private:
  struct BlockActs;
  struct BlockScratch;
  void ensure_buffers(int64_t B, int64_t T);
  // Points the widen buffers at the current bf16_gemm_ (see WidenBuffer::lend_to).
  void lend_widened_units();
  // The shared forward's view of this pass (block_forward.h): (B_, T_) from position 0.
  ForwardContext forward_context() const;
  // Block `layer`'s forward (block_forward.h) with attention over each whole sequence.
  void block_forward(int layer, const float* w, const float* x_NC, float* out_NC, BlockActs& a);
  void block_backward(int layer, const float* w, float* dw, const float* x_NC, float* dx_NC,
                      BlockActs& a);
  void gpt2_block_backward(const UnitSpec& u, const float* w, float* dw, const float* x, float* dx,
                           BlockActs& a);
  void llama_block_backward(const UnitSpec& u, const float* w, float* dw, const float* x, float* dx,
                            BlockActs& a);
  void gemma_block_backward(const UnitSpec& u, const float* w, float* dw, const float* x, float* dx,
                            BlockActs& a);

  ModelLayout layout_;
  TransformerOptions options_;
  std::unique_ptr<kernels::cpu::Bf16Gemm> bf16_gemm_;  // null: fp32 GEMMs
  int64_t B_ = 0, T_ = 0;
  int64_t counted_targets_ = 0;
  int64_t buffer_bytes_ = 0;
  std::vector<int32_t> tokens_, targets_;
  // Residual stream: block l reads residual_[l] and writes residual_[l + 1] (N, C).
  std::vector<Tensor> residual_;
  std::vector<std::unique_ptr<BlockActs>> acts_;  // one per block (one shared if checkpointing)
  std::unique_ptr<BlockScratch> scratch_;
  Tensor final_norm_, final_mean_, final_rstd_;  // (N, C), (N), (N)
  Tensor logits_;                                // (N, V); holds dlogits after backward
  Tensor losses_;                                // (N)
  Tensor dresidual_a_, dresidual_b_;             // (N, C) ping-pong gradient buffers
  Tensor rope_cos_, rope_sin_;                   // (T, D/2)
  Tensor rope_cos_local_, rope_sin_local_;       // Gemma 3's sliding layers (T, D/2)
  // 16-bit models: fp32 copies of the acquired units. The embedding has its own (the tied head
  // holds it while the final unit is held); blocks and the final unit share the other.
  WidenBuffer widened_embedding_, widened_unit_;
};

}  // namespace zero::model
