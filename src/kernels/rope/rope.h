// Rotary position embeddings, HF Llama convention (rotate_half: dim i pairs with i + D/2).
// Legend: B batch, T time, H heads, D head_dim.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zero::kernels::cpu {

// HF RoPE scaling (4.x `rope_scaling`, transformers-5 `rope_parameters`), as transformers'
// modeling_rope_utils computes it. type: "default" (none), "linear" (positions divided by factor),
// "dynamic" (NTK: theta grows once the sequence passes max_position_embeddings), "yarn", "llama3",
// "longrope" (Phi-3: per-frequency short / long factors).
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;                     // llama3
  double high_freq_factor = 4.0;                    // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3, yarn, longrope
  double beta_fast = 32.0;                          // yarn
  double beta_slow = 1.0;                           // yarn
  bool truncate = true;                             // yarn: floor/ceil the correction range
  double attention_factor = 1.0;  // yarn, longrope: cos and sin are multiplied by this (resolved
                                  // on read)
  // longrope: D/2 divisors of the frequencies, for sequences of at most / more than
  // original_max_position_embeddings positions.
  std::vector<double> short_factor, long_factor;
  int64_t max_position_embeddings = 0;  // dynamic: the model's max_position_embeddings
};

// Inverse frequencies inv_freq[i], i < D/2, as HF computes them (in double), with scaling applied.
// seq_len matters for "dynamic" (HF recomputes the frequencies with max(seq_len,
// max_position_embeddings)) and "longrope" (the long factors past
// original_max_position_embeddings): the length of the sequence the tables are for.
std::vector<double> rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& scaling,
                                  int64_t seq_len = 0);

// cos/sin tables (T, D/2): angle = t * inv_freq[i], for positions t = 0..T-1, both multiplied by
// `scale` (yarn's attention_factor; 1 otherwise).
template <typename T>
void rope_tables(T* cos_TD2, T* sin_TD2, const std::vector<double>& inv_freq, int64_t T_,
                 double scale = 1.0);

// out(B, T, H, D) = x * cos + rotate_half(x) * sin. out may alias inp.
template <typename T>
void rope_forward(T* out, const T* inp, const T* cos_TD2, const T* sin_TD2, int64_t B, int64_t T_,
                  int64_t H, int64_t D);

// dinp = R^T dout (the rotation transposed). Overwrites dinp; dinp may alias dout.
template <typename T>
void rope_backward(T* dinp, const T* dout, const T* cos_TD2, const T* sin_TD2, int64_t B,
                   int64_t T_, int64_t H, int64_t D);

}  // namespace zero::kernels::cpu
