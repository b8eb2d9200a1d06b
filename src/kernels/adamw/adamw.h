// Adam / AdamW over flat shards with DeepSpeed's semantics (FusedAdam and DeepSpeedCPUAdam
// agree): adam_w_mode, bias_correction, eps added after the bias-corrected sqrt. The state is fp32,
// or bf16 (DeepSpeed's bf16.bf16_master_weights_and_grads / bf16_optimizer_states: AdamShard's
// *_bf16 pointers). The arguments, and the scalar reference every other version is bitwise equal
// to: adamw_simd.h (AVX2 / AVX-512, one width-templated body), adamw_cuda.h (the fused CUDA
// kernel). Legend: numel elements of one shard.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace zero::kernels {

// Hyper-parameters of one update of one param group. `step` is the group's step counter AFTER
// incrementing for this update (1 on the first update), as DeepSpeed's `state['step']`.
struct AdamArgs {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // the caller passes 0 for no-decay groups (optim/weight_decay.h)
  int64_t step = 1;
  bool adam_w_mode = true;      // true: decoupled decay p -= lr*wd*p; false: L2 (g += wd*p)
  bool bias_correction = true;  // false: bc1 = bc2 = 1
};

// The buffers of one contiguous shard. All fp32 arrays have `numel` elements and must not alias.
// `param_16bit` (optional, may be null) receives the updated params rounded to `param_16bit_dtype`
// (bf16 or f16, round to nearest even) in the same pass, so no second sweep over memory is needed.
// `prev_*` (optional: all three or none) receive param, exp_avg and exp_avg_sq as they were before
// the update, also in the same pass: a rollback copy (the overlapped ZeRO-Offload update,
// runtime/engine.cc) that costs three streamed writes instead of a separate read-and-write sweep.
//
// A bf16 state (DeepSpeed's bf16.bf16_master_weights_and_grads, with bf16_optimizer_states also
// the moments): the master weights in `param_bf16` instead of `param`, and the moments in
// `exp_avg_bf16` / `exp_avg_sq_bf16` instead of `exp_avg` / `exp_avg_sq`. Each value is widened
// exactly to fp32, the update is the fp32 formula of adam_update, and each store rounds to nearest
// even (core/dtype.h's float_to_bf16, what torch's .to(torch.bfloat16) and DeepSpeedCPUAdam do):
// fp32 math in registers, 6 bytes of state per element instead of 12. The 16-bit copy of a bf16
// master is bf16 (the same bits); no prev_* copy.
struct AdamShard {
  float* param = nullptr;       // fp32 master weights, updated in place
  const float* grad = nullptr;  // fp32 gradients, still multiplied by loss scale (see grad_scale)
  float* exp_avg = nullptr;     // first moment m
  float* exp_avg_sq = nullptr;  // second moment v
  int64_t numel = 0;
  void* param_16bit = nullptr;
  DType param_16bit_dtype = DType::kBF16;
  float* prev_param = nullptr;
  float* prev_exp_avg = nullptr;
  float* prev_exp_avg_sq = nullptr;
  bf16* param_bf16 = nullptr;       // bf16 master weights (instead of param)
  bf16* exp_avg_bf16 = nullptr;     // bf16 moments (instead of exp_avg / exp_avg_sq; both or
  bf16* exp_avg_sq_bf16 = nullptr;  // neither, and only with a bf16 master, as in DeepSpeed)

  bool saves_prev() const { return prev_param != nullptr; }
  bool bf16_master() const { return param_bf16 != nullptr; }
  bool bf16_moments() const { return exp_avg_bf16 != nullptr; }
};

// Per-update scalars derived once from AdamArgs (exposed so tests and other backends share them).
struct AdamScalars {
  float step_size;        // -lr / bc1
  float inv_sqrt_bc2;     // 1 / sqrt(bc2)
  float decoupled_decay;  // -lr * wd in AdamW mode, else 0
  float l2_decay;         // wd in Adam-L2 mode, else 0
};
AdamScalars adam_scalars(const AdamArgs& args);

// The fp32 constants of one update (AdamArgs, adam_scalars and grad_scale), computed once on the
// host: the scalar, SIMD and CUDA versions all start from these same bits.
struct AdamConstants {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps, grad_scale;
  float step_size, inv_sqrt_bc2, decoupled_decay, l2_decay;  // AdamScalars
  // A decay term is compiled out when its factor is 0 (DeepSpeed branches on wd > 0), so 0 * inf
  // never turns a finite update into NaN.
  bool l2, decoupled;
};
AdamConstants adam_constants(const AdamArgs& args, float grad_scale);

// The REQUIRES every version checks (ZERO_CHECK, `who` names the version): step >= 1, numel >= 0,
// and when numel > 0 non-null buffers (the master weights in exactly one of param / param_bf16,
// the moments in exactly one pair, bf16 moments only with a bf16 master), a 16-bit copy, if any,
// in bf16 or f16 (bf16 for a bf16 master), and all three prev_* buffers or none (none with a bf16
// state).
void check_adam_call(const AdamArgs& args, const AdamShard& shard, const char* who);

namespace cpu {

// One Adam(W) step, element by element (fp32 math, like DeepSpeedCPUAdam; a bf16 state is widened
// on load and rounded on store, see AdamShard):
//   g  = grad * grad_scale                    grad_scale = 1 / (loss_scale * clip_divisor)
//   g += wd * p                               (Adam-L2 mode only)
//   m  = b1*m + (1-b1)*g ;  v = b2*v + (1-b2)*g^2
//   d  = sqrt(v) / sqrt(bc2) + eps            bc_k = 1 - b_k^step (1 without bias_correction)
//   p += -lr*wd*p                             (AdamW mode only; uses the pre-update p)
//   p += (-lr/bc1) * m / d
// OpenMP-parallel over elements; results are bitwise independent of the thread count.
// REQUIRES: check_adam_call's.
void adam_update(const AdamArgs& args, const AdamShard& shard, float grad_scale);

}  // namespace cpu
}  // namespace zero::kernels
