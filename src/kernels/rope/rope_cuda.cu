// CUDA rotary position embeddings: one block per (b, t) position, threads over its H * D2 pairs.
// Legend: B batch, T time, H heads, D head_dim, D2 = D/2. x/out are (B, T, H, D); tables (T, D2).

#include <algorithm>
#include <limits>
#include <type_traits>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/launch.h"
#include "kernels/cuda_vector.cuh"
#include "kernels/rope/rope_cuda.h"

namespace zero::kernels::cuda {
namespace {

constexpr int kMaxThreads = 256;

// Rotates each pair (x[i], x[i + D2]) of position blockIdx.x = b * T + t by +angle (sign = 1) or
// -angle (sign = -1, the transpose). One thread reads both halves of a pair before writing either,
// and no other thread touches that pair, so out may alias inp (hence no __restrict__).
template <typename T>
__global__ void rope_rotate_kernel(T* out, const T* inp, const float* cos_TD2, const float* sin_TD2,
                                   int T_, int H, int D2, float sign) {
  const int64_t bt = blockIdx.x;  // b * T + t
  const int t = static_cast<int>(bt % T_);
  const float* cos_D2 = cos_TD2 + static_cast<int64_t>(t) * D2;
  const float* sin_D2 = sin_TD2 + static_cast<int64_t>(t) * D2;
  const int64_t row_off = bt * H * 2 * D2;  // start of (b, t, h = 0, d = 0)
  const int pairs_numel = H * D2;
  for (int j = threadIdx.x; j < pairs_numel; j += blockDim.x) {
    const int h = j / D2;
    const int i = j - h * D2;
    const int64_t off = row_off + static_cast<int64_t>(h) * 2 * D2 + i;
    const float x1 = to_f32(inp[off]);
    const float x2 = to_f32(inp[off + D2]);
    const float c = cos_D2[i];
    const float s = sign * sin_D2[i];
    out[off] = from_f32<T>(x1 * c - x2 * s);
    out[off + D2] = from_f32<T>(x2 * c + x1 * s);
  }
}

template <typename T>
void rope_rotate(T* out, const T* inp, const float* cos_TD2, const float* sin_TD2, int64_t B,
                 int64_t T_, int64_t H, int64_t D, float sign, cudaStream_t stream) {
  ZERO_CHECK(D > 0 && D % 2 == 0, "rope head_dim must be even, got ", D);
  ZERO_CHECK(B >= 0 && T_ >= 0 && H >= 0, "rope: bad shape B ", B, " T ", T_, " H ", H);
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  ZERO_CHECK(B * T_ <= kIntMax && H * D <= kIntMax, "rope: shape too large, B*T ", B * T_, " H*D ",
             H * D);
  if (B * T_ == 0 || H == 0) return;
  const int D2 = static_cast<int>(D / 2);
  const int pairs_numel = static_cast<int>(H) * D2;
  // Whole warps, at most kMaxThreads; small heads get one warp.
  const int threads =
      static_cast<int>(std::min<int64_t>(kMaxThreads, (pairs_numel + 31) / 32 * 32));
  ZERO_LAUNCH(static_cast<unsigned>(B * T_), threads, 0, stream, rope_rotate_kernel<T>)
  (out, inp, cos_TD2, sin_TD2, static_cast<int>(T_), static_cast<int>(H), D2, sign);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void rope_forward(T* out, const T* inp, const float* cos_TD2, const float* sin_TD2, int64_t B,
                  int64_t T_, int64_t H, int64_t D, cudaStream_t stream) {
  rope_rotate(out, inp, cos_TD2, sin_TD2, B, T_, H, D, 1.0f, stream);
}

template <typename T>
void rope_backward(T* dinp, const T* dout, const float* cos_TD2, const float* sin_TD2, int64_t B,
                   int64_t T_, int64_t H, int64_t D, cudaStream_t stream) {
  rope_rotate(dinp, dout, cos_TD2, sin_TD2, B, T_, H, D, -1.0f, stream);
}

#define ZERO_INSTANTIATE_ROPE_CUDA(T)                                                        \
  template void rope_forward<T>(T*, const T*, const float*, const float*, int64_t, int64_t,  \
                                int64_t, int64_t, cudaStream_t);                             \
  template void rope_backward<T>(T*, const T*, const float*, const float*, int64_t, int64_t, \
                                 int64_t, int64_t, cudaStream_t);
ZERO_INSTANTIATE_ROPE_CUDA(float)
ZERO_INSTANTIATE_ROPE_CUDA(__nv_bfloat16)
ZERO_INSTANTIATE_ROPE_CUDA(__half)
#undef ZERO_INSTANTIATE_ROPE_CUDA

}  // namespace zero::kernels::cuda
