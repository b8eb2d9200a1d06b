// Softmax cross-entropy over the vocabulary. Legend: N positions (B*T), V vocab.
// Targets equal to kIgnoreIndex (-100, PyTorch's default) contribute no loss and no gradient.
#pragma once

#include <cstdint>

namespace zero::kernels::cpu {

inline constexpr int32_t kIgnoreIndex = -100;

// losses(N) = logsumexp(logits[n]) - logits[n, target[n]] (0 for ignored targets). Overwrites
// losses.
template <typename T>
void cross_entropy_forward(T* losses, const T* logits, const int32_t* targets, int64_t N,
                           int64_t V);

// dlogits(N, V) = (softmax(logits[n]) - onehot(target[n])) * dloss[n]. Overwrites dlogits; dlogits
// may alias logits (the fused, memory-saving form). dloss is usually 1 / (number of counted
// tokens).
template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const int32_t* targets, const T* dloss,
                            int64_t N, int64_t V);

}  // namespace zero::kernels::cpu
