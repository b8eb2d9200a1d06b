// Causal scaled-dot-product attention with grouped-query heads (Hq query heads share Hkv key/value
// heads, Hq % Hkv == 0; Hq == Hkv is plain multi-head). Scale 1/sqrt(D).
// Legend: B batch, T time, Hq / Hkv heads, D head_dim. q/out are (B, T, Hq, D); k/v are (B, T, Hkv,
// D).
#pragma once

#include <cstdint>

namespace zero::kernels::cpu {

// out = softmax(q·k^T / (sqrt(D) * score_divisor) + mask) · v. Saves probs att(B, Hq, T, T) for
// backward (masked entries are written as 0). Overwrites out and att.
// Mask: causal (query t sees keys s <= t); with window > 0 also sliding-window, HF Mistral/Qwen2
// semantics: t sees s with t - s < window (window keys including itself).
// score_divisor: extra divisor of the scores (GPT-2 scale_attn_by_inverse_layer_idx: layer + 1).
// softcap > 0 (Gemma 2 attn_logit_softcapping): the scaled scores become softcap * tanh(s /
// softcap) before the mask and the softmax.
template <typename T>
void attention_forward(T* out, T* att, const T* q, const T* k, const T* v, int64_t B, int64_t T_,
                       int64_t Hq, int64_t Hkv, int64_t D, int64_t window = 0,
                       double score_divisor = 1.0, double softcap = 0.0);

// Accumulates dq, dk, dv given dout and the saved att (same window / score_divisor / softcap as
// the forward; masked entries of att are 0, so the window needs no further handling here; with a
// softcap the scores are recomputed for tanh's derivative).
template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k,
                        const T* v, int64_t B, int64_t T_, int64_t Hq, int64_t Hkv, int64_t D,
                        double score_divisor = 1.0, double softcap = 0.0);

}  // namespace zero::kernels::cpu
