// CUDA softmax cross-entropy over the vocabulary, the twin of cross_entropy.h, plus llm.c's fused
// single-kernel loss-and-gradient. Legend: N positions (B*T), V vocab. logits/dlogits are (N, V)
// in T; targets (N) int32; losses and dloss (N) fp32. Targets equal to cpu::kIgnoreIndex (-100)
// give loss 0 and a zero gradient row. One block per row; all arithmetic in fp32.
// Performance: memory bound. The gradient kernels read a row twice (online max/sum, then the
// softmax) and write it once: 3x the logits' bytes at worst, less when the second read hits L2
// (unlikely at Llama's V: ~500 resident 256 KB rows exceed an H100's 50 MB L2). Accesses are
// 16-byte vectors when every row starts 16-byte aligned (a row stride whose bytes are a multiple of
// 16 and aligned base pointers: Llama 3's 128256, or a 16-bit model's logits, whose rows are padded
// to 8 elements; a V that is not a multiple of the vector ends in a scalar tail), scalar otherwise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace zero::kernels::cuda {

// losses(N) = logsumexp(logits[n]) - logits[n, target[n]] (0 for ignored targets); logits rows
// logits_ld >= V elements apart (a padded row stride; the padding is not read). Overwrites
// losses. A target outside [0, V) other than -100 is a data bug: its row's loss is NaN (no
// out-of-bounds read; the NaN shows in the loss and trips the overflow check).
template <typename T>
void cross_entropy_forward(float* losses, const T* logits, int64_t logits_ld,
                           const int32_t* targets, int64_t N, int64_t V, cudaStream_t stream);

// dlogits(N, V) = (softmax(logits[n]) - onehot(target[n])) * dloss[n]. Overwrites dlogits (zero
// rows for ignored targets, NaN rows for out-of-range ones); dlogits may alias logits (in place).
// softcap > 0 (Gemma 2's final_logit_softcapping): `logits` are the capped L = softcap * tanh(x /
// softcap) (softcap_logits) and the gradient is the uncapped x's, each element times
// 1 - (L / softcap)^2 (tanh's slope, from the capped value itself: nothing else is kept).
template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const int32_t* targets, const float* dloss,
                            int64_t N, int64_t V, cudaStream_t stream, float softcap = 0.0f);

// The gradient of fp32 logits straight into a 16-bit copy (T16 = __nv_bfloat16 or __half), for a
// 16-bit model's LM head GEMMs: dlogits16[n, 0:V] = T16(cross_entropy_backward<float>'s value), one
// round to nearest even of the same fp32 number, so bitwise what the fp32 write and a cast pass
// give, without the fp32 (N, V) write and its re-read. Rows dlogits_ld >= V elements apart; the
// padding [V, dlogits_ld) of each row is left as it is. logits (rows logits_ld >= V elements
// apart) is only read. The summation order depends on the logits' layout alone, so the bits do not
// depend on the alignment of dlogits16 (a misaligned one is written element by element).
// softcap as cross_entropy_backward's (the slope applied in fp32, before the one rounding).
template <typename T16>
void cross_entropy_backward_16(T16* dlogits16, int64_t dlogits_ld, const float* logits,
                               int64_t logits_ld, const int32_t* targets, const float* dloss,
                               int64_t N, int64_t V, cudaStream_t stream, float softcap = 0.0f);

// Gemma 2's final-logit soft-capping, in place: logits[n, 0:V] = softcap * tanh(logits[n, 0:V] /
// softcap) in fp32, rows logits_ld >= V elements apart (the padding is not touched), as the CPU
// model (transformer.cc). Its backward is cross_entropy_backward's softcap. REQUIRES: softcap > 0.
void softcap_logits(float* logits, int64_t logits_ld, int64_t N, int64_t V, float softcap,
                    cudaStream_t stream);

// llm.c's fused form: losses(N) as cross_entropy_forward, and logits_inout(N, V) overwritten by
// their gradient (softmax - onehot) * dloss_per_token, in one kernel (the logits are read twice and
// written once). dloss_per_token is usually 1 / (number of counted tokens in the batch).
template <typename T>
void cross_entropy_fused(float* losses, T* logits_inout, const int32_t* targets,
                         float dloss_per_token, int64_t N, int64_t V, cudaStream_t stream);

}  // namespace zero::kernels::cuda
