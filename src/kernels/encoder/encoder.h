// Token (+ learned position) embedding lookup. Legend: B batch, T time, C channels, V vocab.
#pragma once

#include <cstdint>

namespace zero::kernels::cpu {

// out(B, T, C) = wte[tokens[b, t]] + (wpe ? wpe[t] : 0). Overwrites out.
// Token ids out of [0, V) are a caller bug (checked by the data layer); the kernel ZERO_CHECKs
// them.
template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                     int64_t T_, int64_t C, int64_t V);

// Accumulates: dwte[tokens[b, t]] += dout[b, t]; dwpe[t] += dout[b, t] (dwpe may be null).
template <typename T>
void encoder_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int64_t B, int64_t T_,
                      int64_t C, int64_t V);

}  // namespace zero::kernels::cpu
