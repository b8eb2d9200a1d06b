// CUDA rotary position embeddings, the twin of rope.h (HF Llama rotate_half: dim i pairs with
// i + D/2). Legend: B batch, T time, H heads, D head_dim, D2 = D/2 (number of rotated pairs).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace zero::kernels::cuda {

// out(B, T, H, D) = x * cos + rotate_half(x) * sin for x = inp(B, T, H, D), in fp32, stored as T.
// cos_TD2 / sin_TD2 are (T, D2) fp32 tables on the device (cpu::rope_tables<float> computed on the
// host and uploaded by the caller; tables built for more positions work too, only rows 0..T-1 are
// read). Overwrites out; out may alias inp (in place). REQUIRES: D even. One block per (b, t).
template <typename T>
void rope_forward(T* out, const T* inp, const float* cos_TD2, const float* sin_TD2, int64_t B,
                  int64_t T_, int64_t H, int64_t D, cudaStream_t stream);

// dinp(B, T, H, D) = R^T dout (each pair rotated by -angle). Overwrites dinp; dinp may alias dout.
// REQUIRES: D even.
template <typename T>
void rope_backward(T* dinp, const T* dout, const float* cos_TD2, const float* sin_TD2, int64_t B,
                   int64_t T_, int64_t H, int64_t D, cudaStream_t stream);

}  // namespace zero::kernels::cuda
