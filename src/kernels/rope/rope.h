// Rotary position embeddings, HF Llama convention (rotate_half: dim i pairs with i + D/2).
// Legend: B batch, T time, H heads, D head_dim.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zero::kernels::cpu {

// HF `rope_scaling`; type "default" (none) or "llama3" (Llama 3.1 frequency scaling).
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// Inverse frequencies inv_freq[i], i < D/2, as HF computes them (in double), with scaling applied.
std::vector<double> rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& scaling);

// cos/sin tables (T, D/2): angle = t * inv_freq[i], for positions t = 0..T-1.
template <typename T>
void rope_tables(T* cos_TD2, T* sin_TD2, const std::vector<double>& inv_freq, int64_t T_);

// out(B, T, H, D) = x * cos + rotate_half(x) * sin. out may alias inp.
template <typename T>
void rope_forward(T* out, const T* inp, const T* cos_TD2, const T* sin_TD2, int64_t B, int64_t T_,
                  int64_t H, int64_t D);

// dinp = R^T dout (the rotation transposed). Overwrites dinp; dinp may alias dout.
template <typename T>
void rope_backward(T* dinp, const T* dout, const T* cos_TD2, const T* sin_TD2, int64_t B,
                   int64_t T_, int64_t H, int64_t D);

}  // namespace zero::kernels::cpu
