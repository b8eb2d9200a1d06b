// Attention of the newest rows over a key/value cache, for KV-cached decoding on the GPU
// (model/cuda_kv_decoder.h): one query row per (row, head) against every cached key up to its own
// position, grouped-query heads as attention_cuda.h (query head h reads kv head h / (Hq / Hkv)).
// The CPU twin is KvDecoder's attention (model/kv_decoder.cc), which the model tests compare with;
// decode_attention_cuda_test.cc checks the kernel against a double-precision loop.
// Legend: n new rows, Hq / Hkv heads, D head dim, P cached positions before the new rows.
// q / y (n, Hq, D); k_cache / v_cache (capacity, Hkv, D), fp32 (the CUDA model's activation dtype)
// or bf16.
//
// Numerics: fp32 throughout, each score's dot product summed over D in order (as the CPU twin), an
// online softmax over chunks of keys (the running max / sum / output rescaled per chunk), so the
// cache length has no limit from shared memory. Not bitwise the CPU twin's two-pass softmax; within
// fp32 rounding.
// Deterministic: no atomics, a fixed summation order.
// Performance: a block per (row, head, split of its keys) streams its share of the kv head's
// cached rows once, a key per thread; splits (one per 128 keys, up to ~1024 blocks in all) keep a
// one-row decode step from reading a long cache with only Hq blocks. Not measured on a GPU yet. A
// prefill into an empty cache takes the flash kernel instead (cuda_kv_decoder.cc).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace zero::kernels::cuda {

// y[i, h] = softmax_j(q[i, h] · k_cache[j, h / G] * scale) · v_cache[j, h / G] over the keys
// j in [first_i, P + i], where scale = 1 / (sqrt(D) * score_divisor) and first_i = 0, or with
// window > 0, max(0, P + i + 1 - window) (the sliding window of attention_forward); softcap > 0
// (Gemma 2): each scaled score s becomes softcap * tanh(s / softcap) first. The new rows'
// keys and values must already be in the cache at rows [P, P + n). Overwrites y.
// scratch: decode_attention_scratch_bytes(D) bytes of 4-byte-aligned device memory (overwritten)
// for splitting long rows' keys over several blocks and combining their partials (flash-decoding,
// when n * Hq blocks are too few for the GPU); null: one block per (row, head), no split.
// REQUIRES: n >= 1, P >= 0, Hkv > 0, Hq % Hkv == 0, 1 <= D <= 256; y does not overlap q.
void decode_attention(float* y, const float* q, const float* k_cache, const float* v_cache,
                      int64_t n, int64_t P, int64_t Hq, int64_t Hkv, int64_t D, void* scratch,
                      cudaStream_t stream, int64_t window = 0, double score_divisor = 1.0,
                      double softcap = 0.0);

// The same over a bf16 key/value cache (CudaKvDecoder's for 16-bit models: half the bytes per
// cached key), each key and value widened to fp32 exactly as it is read; the rest as above.
void decode_attention(float* y, const float* q, const __nv_bfloat16* k_cache,
                      const __nv_bfloat16* v_cache, int64_t n, int64_t P, int64_t Hq, int64_t Hkv,
                      int64_t D, void* scratch, cudaStream_t stream, int64_t window = 0,
                      double score_divisor = 1.0, double softcap = 0.0);

// The scratch decode_attention needs for head dim D, whatever n, P and Hq: the splits' partials
// are at most ~1024 blocks of D + 2 floats.
size_t decode_attention_scratch_bytes(int64_t D);

}  // namespace zero::kernels::cuda
