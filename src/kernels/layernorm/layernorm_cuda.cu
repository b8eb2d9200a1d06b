// CUDA LayerNorm: one warp per row (8 rows per block), 16-byte vector accesses when C and the
// pointers allow them, fp32 statistics reduced with warp shuffles. The backward runs the input
// gradient per row, then the weight / bias gradients as deterministic column sums
// (norm_param_grad_cuda.cuh). Legend: N rows, C channels.

#include "kernels/layernorm/layernorm_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/launch.h"
#include "kernels/cuda_vector.cuh"
#include "kernels/layernorm/norm_param_grad_cuda.cuh"

namespace zero::kernels::cuda {
namespace {

// Row n = this warp's row. REQUIRES (kPack > 1): C % kPack == 0 and every pointer aligned to kPack
// elements, so each row starts aligned.
template <typename T, int kPack>
__global__ void __launch_bounds__(kNormRowWarps * 32)
    layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                             const T* bias, int64_t N, int64_t C, float eps, Rounded16 copy16) {
  const int lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kNormRowWarps + threadIdx.x / 32;
  if (n >= N) return;  // warp-uniform: the shuffles below always see the full warp
  const T* x_C = inp + n * C;
  T* y_C = out + n * C;
  const int64_t stride = 32 * kPack;
  const float C_f = static_cast<float>(C);

  float sum = 0.0f;
  for (int64_t c = lane * kPack; c < C; c += stride) {
    float x[kPack];
    load_f32<kPack>(x_C + c, x);
#pragma unroll
    for (int k = 0; k < kPack; ++k) sum += x[k];
  }
  const float m = __fdiv_rn(warp_sum(sum), C_f);

  float var_sum = 0.0f;  // two-pass variance, as the CPU twin: no cancellation from E[x²] - m²
  for (int64_t c = lane * kPack; c < C; c += stride) {
    float x[kPack];
    load_f32<kPack>(x_C + c, x);  // the row was just read: an L1 / L2 hit
#pragma unroll
    for (int k = 0; k < kPack; ++k) var_sum += (x[k] - m) * (x[k] - m);
  }
  const float s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(warp_sum(var_sum), C_f), eps)));

  for (int64_t c = lane * kPack; c < C; c += stride) {
    float x[kPack], w[kPack], b[kPack] = {};
    load_f32<kPack>(x_C + c, x);
    load_f32<kPack>(weight + c, w);
    if (bias != nullptr) load_f32<kPack>(bias + c, b);
    float y[kPack];
#pragma unroll
    for (int k = 0; k < kPack; ++k) y[k] = (x[k] - m) * s * w[k] + b[k];
    store_f32<kPack>(y_C + c, y);
    if (copy16.data != nullptr) {
#pragma unroll
      for (int k = 0; k < kPack; ++k) store_rounded16(copy16, n * copy16.ld + c + k, y[k]);
    }
  }
  if (lane == 0) {
    if (mean != nullptr) mean[n] = m;
    if (rstd != nullptr) rstd[n] = s;
  }
}

// dinp of row n (this warp's row). The per-element terms use explicit roundings in the CPU twin's
// order (no contraction into fma): for tiny C the terms cancel almost exactly and the result is
// rstd times their rounding error, which then matches the CPU's. REQUIRES as the forward kernel.
template <typename T, int kPack>
__global__ void __launch_bounds__(kNormRowWarps * 32)
    layernorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                   const float* mean, const float* rstd, int64_t N, int64_t C) {
  const int lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kNormRowWarps + threadIdx.x / 32;
  if (n >= N) return;  // warp-uniform
  const T* x_C = inp + n * C;
  const T* dy_C = dout + n * C;
  T* dx_C = dinp + n * C;
  const int64_t stride = 32 * kPack;
  const float C_f = static_cast<float>(C);
  const float m = mean[n], s = rstd[n];

  float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
  for (int64_t c = lane * kPack; c < C; c += stride) {
    float x[kPack], dy[kPack], w[kPack];
    load_f32<kPack>(x_C + c, x);
    load_f32<kPack>(dy_C + c, dy);
    load_f32<kPack>(weight + c, w);
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      const float dnorm = __fmul_rn(dy[k], w[k]);
      dnorm_sum += dnorm;
      dnorm_norm_sum += __fmul_rn(__fmul_rn(dnorm, __fsub_rn(x[k], m)), s);
    }
  }
  const float dnorm_mean = __fdiv_rn(warp_sum(dnorm_sum), C_f);
  const float dnorm_norm_mean = __fdiv_rn(warp_sum(dnorm_norm_sum), C_f);

  for (int64_t c = lane * kPack; c < C; c += stride) {
    float x[kPack], dy[kPack], w[kPack], dx[kPack];
    load_f32<kPack>(x_C + c, x);
    load_f32<kPack>(dy_C + c, dy);
    load_f32<kPack>(weight + c, w);
    load_f32<kPack>(dx_C + c, dx);
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      const float norm = __fmul_rn(__fsub_rn(x[k], m), s);
      const float dnorm = __fmul_rn(dy[k], w[k]);
      const float t = __fsub_rn(__fsub_rn(dnorm, dnorm_mean), __fmul_rn(norm, dnorm_norm_mean));
      dx[k] = __fadd_rn(dx[k], __fmul_rn(t, s));
    }
    store_f32<kPack>(dx_C + c, dx);
  }
}

// Blocks for the one-warp-per-row kernels.
unsigned row_blocks(int64_t N) {
  return static_cast<unsigned>((N + kNormRowWarps - 1) / kNormRowWarps);
}

void check_rows(int64_t N, int64_t C) {
  ZERO_CHECK(N >= 0 && C >= 0, "layernorm: bad shape N ", N, " C ", C);
  ZERO_CHECK(N == 0 || C >= 1, "layernorm: C must be >= 1, got ", C);
  ZERO_CHECK((N + kNormRowWarps - 1) / kNormRowWarps <= int64_t{0x7fffffff},
             "layernorm: too many rows ", N);
}

}  // namespace

template <typename T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                       const T* bias, int64_t N, int64_t C, float eps, cudaStream_t stream,
                       Rounded16 copy16) {
  check_rows(N, C);
  if (N == 0) return;
  constexpr int kPack = kVec16<T>;
  if (C % kPack == 0 && all_pack_aligned<kPack>(out, inp, weight, bias)) {
    ZERO_LAUNCH(row_blocks(N), kNormRowWarps * 32, 0, stream, layernorm_forward_kernel<T, kPack>)
    (out, mean, rstd, inp, weight, bias, N, C, eps, copy16);
  } else {
    ZERO_LAUNCH(row_blocks(N), kNormRowWarps * 32, 0, stream, layernorm_forward_kernel<T, 1>)
    (out, mean, rstd, inp, weight, bias, N, C, eps, copy16);
  }
  CUDA_CHECK_LAUNCH();
}

size_t layernorm_backward_scratch_bytes(int64_t N, int64_t C) {
  return norm_grad_partials_bytes(N, C, /*with_bias=*/true);
}

template <typename T>
void layernorm_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                        const T* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                        void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  check_rows(N, C);
  if (N == 0 || C == 0) return;
  ZERO_CHECK(scratch_bytes >= layernorm_backward_scratch_bytes(N, C), "layernorm: scratch of ",
             scratch_bytes, " bytes < ", layernorm_backward_scratch_bytes(N, C));
  ZERO_CHECK(reinterpret_cast<uintptr_t>(scratch) % alignof(float) == 0,
             "layernorm: misaligned scratch");
  constexpr int kPack = kVec16<T>;
  if (C % kPack == 0 && all_pack_aligned<kPack>(dinp, dout, inp, weight)) {
    ZERO_LAUNCH(row_blocks(N), kNormRowWarps * 32, 0, stream,
                layernorm_backward_dinp_kernel<T, kPack>)
    (dinp, dout, inp, weight, mean, rstd, N, C);
  } else {
    ZERO_LAUNCH(row_blocks(N), kNormRowWarps * 32, 0, stream, layernorm_backward_dinp_kernel<T, 1>)
    (dinp, dout, inp, weight, mean, rstd, N, C);
  }
  CUDA_CHECK_LAUNCH();
  launch_norm_param_grads<T>(dweight, dbias, dout, inp, mean, rstd, N, C,
                             static_cast<float*>(scratch), stream);
}

#define ZERO_INSTANTIATE_LAYERNORM_CUDA(T)                                                         \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int64_t,    \
                                     int64_t, float, cudaStream_t, Rounded16);                     \
  template void layernorm_backward<T>(T*, float*, float*, const T*, const T*, const T*,            \
                                      const float*, const float*, int64_t, int64_t, void*, size_t, \
                                      cudaStream_t);
ZERO_INSTANTIATE_LAYERNORM_CUDA(float)
ZERO_INSTANTIATE_LAYERNORM_CUDA(__nv_bfloat16)
ZERO_INSTANTIATE_LAYERNORM_CUDA(__half)
#undef ZERO_INSTANTIATE_LAYERNORM_CUDA

}  // namespace zero::kernels::cuda
