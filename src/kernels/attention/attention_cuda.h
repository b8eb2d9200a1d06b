// CUDA causal scaled-dot-product attention with grouped-query heads, flash-attention style: the
// (T x T) score matrix never exists in memory; the forward keeps an online softmax per query row
// and saves its logsumexp, the backward recomputes probabilities tile by tile. The twin of
// attention.h (same layouts, scale 1/sqrt(D), Hq % Hkv == 0, query head h uses kv head h / G).
// Legend: B batch, T time, Hq / Hkv heads, G = Hq / Hkv, D head_dim (any D in 1..256).
// q/out/dout/dq are (B, T, Hq, D) and k/v/dk/dv are (B, T, Hkv, D), in T; lse is (B, Hq, T) fp32.
//
// Numerics: every product and sum is fp32; scores, probabilities and partial outputs live in fp32
// registers / shared memory, and only the final out / dq / dk / dv are rounded to T.
// Determinism: no atomics; each output element is summed by one thread in a fixed order, so results
// are bitwise reproducible run to run (and independent of the launch schedule).
//
// Performance (what to expect, what comes next): a correctness-first kernel. Tiles of 32 keys or
// queries (one per lane) are staged in shared memory as fp32 and multiplied on the CUDA cores, so
// it is bound by shared-memory bandwidth at roughly 20-30% of the fp32 peak: think 10-20 TFLOP/s on
// an H100, well over an order of magnitude below FlashAttention-2/3 or cuDNN's fused SDPA on tensor
// cores. Head dims are bucketed (<= 32, 64, 128, 256; smaller D is zero-padded, so D = 8 costs as
// much as D = 32). The backward recomputes the scores and dout·v twice (in the dk/dv kernel and in
// the dq kernel) to avoid atomics: 8 tile products per (query tile, key tile) pair instead of
// FlashAttention-2's 5. Next steps, in order: bf16/fp16 mma.sync (m16n8k16, fp32 accumulate) for
// the tile products with ldmatrix loads, cp.async double buffering of the streamed tiles, and
// exp2f with log2(e) folded into the scale; or cuDNN's SDPA through cudnn-frontend as the
// production path on sm_90.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace zero::kernels::cuda {

// out = softmax(q·k^T / sqrt(D) + causal mask) · v, and lse[b, h, t] = log Σ_{s<=t} exp(q_t·k_s /
// sqrt(D)) (natural log, fp32) for the backward. Overwrites out and lse.
// REQUIRES: Hkv > 0, Hq % Hkv == 0, 1 <= D <= 256. Dynamic shared memory per block: up to 81 KiB
// here and 97 KiB in the backward (D > 128), within every sm_80+ GPU's opt-in limit (99 KiB on
// sm_86/89).
// window > 0: sliding-window mask as the CPU twin (query t sees keys with t - s < window);
// score_divisor: extra divisor of the scores (GPT-2 scale_attn_by_inverse_layer_idx; Gemma's
// query_pre_attn_scalar); softcap > 0 (Gemma 2's attn_logit_softcapping): the scaled scores become
// softcap * tanh(s / softcap) before the mask and the softmax, as the CPU twin (lse is over the
// capped scores). softcap = 0 costs one uniform branch per score, outside the dot products.
template <typename T>
void attention_forward(T* out, float* lse, const T* q, const T* k, const T* v, int64_t B,
                       int64_t T_, int64_t Hq, int64_t Hkv, int64_t D, cudaStream_t stream,
                       int64_t window = 0, double score_divisor = 1.0, double softcap = 0.0);

// Bytes of device scratch attention_backward needs: delta = Σ_s p[t, s] (dout[t]·v[s]) per query
// row, (B, Hq, T) fp32.
size_t attention_backward_scratch_bytes(int64_t B, int64_t T_, int64_t Hq, int64_t Hkv, int64_t D);

// Accumulates (read-add-write) dq, dk, dv given dout, the forward's lse and its inputs, like the
// CPU twin: dk/dv of a kv head sum over the G query heads that share it. scratch holds
// attention_backward_scratch_bytes(...) bytes of 4-byte-aligned device memory (overwritten).
// Two launches on `stream`: dq (one block per query head and query tile), which also computes
// delta in fp32 from the recomputed probabilities, then dk/dv (one block per kv head and key
// tile, looping over its G query heads and the query tiles at or after it).
// `out` is not read: FlashAttention's delta = rowsum(dout * out) over out rounded to bf16 misses
// the CPU twin by several percent when D is small (dp - delta cancels); the exact fp32 delta
// costs one extra column sum (Σ p k) in the dq pass. The parameter keeps the usual interface (a
// tensor-core version may want it back).
// window, score_divisor and softcap as the forward's; with a softcap the score gradient is also
// multiplied by tanh's slope 1 - tanh^2(s / softcap), tanh recomputed from the scores.
template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const float* lse,
                        const T* q, const T* k, const T* v, int64_t B, int64_t T_, int64_t Hq,
                        int64_t Hkv, int64_t D, void* scratch, cudaStream_t stream,
                        int64_t window = 0, double score_divisor = 1.0, double softcap = 0.0);

}  // namespace zero::kernels::cuda
