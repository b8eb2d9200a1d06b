// CUDA twin of the scalar Adam / AdamW reference (adamw.h): the same per-element formula, in the
// same unfused fp32 operation order, so the result is bitwise equal to cpu::adam_update's. Legend:
// numel elements of one contiguous shard. The launcher enqueues on `stream` only, never
// synchronises and never allocates.
#pragma once

#include <cuda_runtime.h>

#include "kernels/adamw/adamw.h"

namespace zero::kernels::cuda {

// One Adam(W) step over `shard`, whose pointers (param, grad, exp_avg, exp_avg_sq, optional
// param_16bit) are DEVICE pointers: exactly the formula of cpu::adam_update (DeepSpeed's order of
// operations; adam_w_mode; bias_correction; grad_scale = 1 / (loss_scale * clip_divisor); decay
// terms skipped when their factor is 0), each operation rounded separately in fp32, so param,
// exp_avg, exp_avg_sq and the 16-bit copy (round to nearest even, NaN handled as core/dtype.h)
// are bitwise equal to the CPU's; so is a bf16 state (AdamShard's *_bf16 pointers). Vector (float4)
// accesses when all pointers are 16-byte aligned (param_16bit 8-byte aligned), element by element
// otherwise; the result is the same either way. REQUIRES: args.step >= 1; non-null fp32 pointers
// when numel > 0; buffers do not alias; the translation unit is built without -ftz=true /
// --use_fast_math (denormals must survive, as on the CPU).
void adam_update(const AdamArgs& args, const AdamShard& shard_on_device, float grad_scale,
                 cudaStream_t stream);

}  // namespace zero::kernels::cuda
