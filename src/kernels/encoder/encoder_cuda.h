// CUDA twin of the token (+ learned position) embedding (encoder.h). Legend: B batch, T time,
// C channels, V vocab, N = B*T positions. out, dout (B, T, C), wte (V, C) and wpe (T, C) are stored
// in T (float, bf16, fp16); dwte (V, C) and dwpe (T, C) are fp32; all arithmetic is fp32; tokens
// (B, T) are int32 on the device. Launchers enqueue on `stream` only, never synchronise and never
// allocate.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace zero::kernels::cuda {

// out(B, T, C) = wte[tokens[b, t]] + (wpe ? wpe[t] : 0), added in fp32 and rounded once to T.
// Overwrites out. Token ids outside [0, V) are a caller bug (the data layer checks them): such a
// position's row of out is NaN (no out-of-bounds read), so it shows in the loss.
template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                     int64_t T_, int64_t C, int64_t V, cudaStream_t stream);

// Device scratch encoder_backward needs for B*T positions and vocabulary V (sorted token ids and
// positions, plus the radix sort's temporary storage; independent of C).
// REQUIRES: a current CUDA device (the sort's temporary size depends on it).
size_t encoder_backward_scratch_bytes(int64_t B, int64_t T_, int64_t V);

// Accumulates dwte[v] += Σ_{(b, t): tokens[b, t] = v} dout[b, t] and dwpe[t] += Σ_b dout[b, t]
// (fp32; dwpe may be null). Each gradient row receives one fp32 sum of its positions' rows, taken
// in (b, t) order (positions are grouped by token id with a stable radix sort): deterministic, no
// atomics. Positions whose token is outside [0, V) (a caller bug) contribute nothing to dwte.
// REQUIRES: scratch_bytes >= encoder_backward_scratch_bytes(B, T_, V), scratch 256-byte aligned
// (as cudaMalloc and DeviceArena give) and not in use by another stream.
template <typename T>
void encoder_backward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens, int64_t B,
                      int64_t T_, int64_t C, int64_t V, void* scratch, size_t scratch_bytes,
                      cudaStream_t stream);

}  // namespace zero::kernels::cuda
