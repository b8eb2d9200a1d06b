// Causal scaled-dot-product attention with grouped-query heads (Hq query heads share Hkv key/value
// heads, Hq % Hkv == 0; Hq == Hkv is plain multi-head). Scale 1/sqrt(D).
// Legend: B batch, T time, Hq / Hkv heads, D head_dim. q/out are (B, T, Hq, D); k/v are (B, T, Hkv,
// D).
#pragma once

#include <cstdint>

namespace zero::kernels::cpu {

// out = softmax(q·k^T / sqrt(D) + causal mask) · v. Saves probs att(B, Hq, T, T) for backward
// (entries above the diagonal are written as 0). Overwrites out and att.
template <typename T>
void attention_forward(T* out, T* att, const T* q, const T* k, const T* v, int64_t B, int64_t T_,
                       int64_t Hq, int64_t Hkv, int64_t D);

// Accumulates dq, dk, dv given dout and the saved att.
template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k,
                        const T* v, int64_t B, int64_t T_, int64_t Hq, int64_t Hkv, int64_t D);

}  // namespace zero::kernels::cpu
