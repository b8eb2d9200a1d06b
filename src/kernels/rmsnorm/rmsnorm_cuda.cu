// CUDA RMSNorm: one warp per row (8 rows per block), 16-byte vector accesses when C and the
// pointers allow them, fp32 sums reduced with warp shuffles. The backward runs the input gradient
// per row, then dweight as deterministic column sums (layernorm/norm_param_grad_cuda.cuh, shared
// with LayerNorm). Legend: N rows, C channels.

#include "kernels/rmsnorm/rmsnorm_cuda.h"

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
    rmsnorm_forward_kernel(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C,
                           float eps, Rounded16 copy16) {
  const int lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kNormRowWarps + threadIdx.x / 32;
  if (n >= N) return;  // warp-uniform: the shuffles below always see the full warp
  const T* x_C = inp + n * C;
  T* y_C = out + n * C;
  const int64_t stride = 32 * kPack;

  float sum_sq = 0.0f;
  for (int64_t c = lane * kPack; c < C; c += stride) {
    float x[kPack];
    load_f32<kPack>(x_C + c, x);
#pragma unroll
    for (int k = 0; k < kPack; ++k) sum_sq += x[k] * x[k];
  }
  const float mean_sq = __fdiv_rn(warp_sum(sum_sq), static_cast<float>(C));
  const float s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, eps)));

  for (int64_t c = lane * kPack; c < C; c += stride) {
    float x[kPack], w[kPack], y[kPack];
    load_f32<kPack>(x_C + c, x);  // the row was just read: an L1 / L2 hit
    load_f32<kPack>(weight + c, w);
#pragma unroll
    for (int k = 0; k < kPack; ++k) y[k] = __fmul_rn(__fmul_rn(x[k], s), w[k]);  // HF order
    store_f32<kPack>(y_C + c, y);
    if (copy16.data != nullptr) {
#pragma unroll
      for (int k = 0; k < kPack; ++k) store_rounded16(copy16, n * copy16.ld + c + k, y[k]);
    }
  }
  if (lane == 0 && rstd != nullptr) rstd[n] = s;
}

// dinp of row n (this warp's row). The per-element terms use explicit roundings in the CPU twin's
// order (no contraction into fma): for tiny C the terms nearly cancel and the result is rstd times
// their rounding error, which then matches the CPU's. REQUIRES as the forward kernel.
template <typename T, int kPack>
__global__ void __launch_bounds__(kNormRowWarps * 32)
    rmsnorm_backward_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                 const float* rstd, int64_t N, int64_t C) {
  const int lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kNormRowWarps + threadIdx.x / 32;
  if (n >= N) return;  // warp-uniform
  const T* x_C = inp + n * C;
  const T* dy_C = dout + n * C;
  T* dx_C = dinp + n * C;
  const int64_t stride = 32 * kPack;
  const float s = rstd[n];

  float dnorm_norm_sum = 0.0f;
  for (int64_t c = lane * kPack; c < C; c += stride) {
    float x[kPack], dy[kPack], w[kPack];
    load_f32<kPack>(x_C + c, x);
    load_f32<kPack>(dy_C + c, dy);
    load_f32<kPack>(weight + c, w);
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      dnorm_norm_sum += __fmul_rn(__fmul_rn(__fmul_rn(dy[k], w[k]), x[k]), s);
    }
  }
  const float dnorm_norm_mean = __fdiv_rn(warp_sum(dnorm_norm_sum), static_cast<float>(C));

  for (int64_t c = lane * kPack; c < C; c += stride) {
    float x[kPack], dy[kPack], w[kPack], dx[kPack];
    load_f32<kPack>(x_C + c, x);
    load_f32<kPack>(dy_C + c, dy);
    load_f32<kPack>(weight + c, w);
    load_f32<kPack>(dx_C + c, dx);
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      const float dnorm = __fmul_rn(dy[k], w[k]);
      const float t = __fsub_rn(dnorm, __fmul_rn(__fmul_rn(x[k], s), dnorm_norm_mean));
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
  ZERO_CHECK(N >= 0 && C >= 0, "rmsnorm: bad shape N ", N, " C ", C);
  ZERO_CHECK(N == 0 || C >= 1, "rmsnorm: C must be >= 1, got ", C);
  ZERO_CHECK((N + kNormRowWarps - 1) / kNormRowWarps <= int64_t{0x7fffffff},
             "rmsnorm: too many rows ", N);
}

}  // namespace

template <typename T>
void rmsnorm_forward(T* out, float* rstd, const T* inp, const T* weight, int64_t N, int64_t C,
                     float eps, cudaStream_t stream, Rounded16 copy16) {
  check_rows(N, C);
  if (N == 0) return;
  constexpr int kPack = kVec16<T>;
  if (C % kPack == 0 && all_pack_aligned<kPack>(out, inp, weight)) {
    ZERO_LAUNCH(row_blocks(N), kNormRowWarps * 32, 0, stream, rmsnorm_forward_kernel<T, kPack>)
    (out, rstd, inp, weight, N, C, eps, copy16);
  } else {
    ZERO_LAUNCH(row_blocks(N), kNormRowWarps * 32, 0, stream, rmsnorm_forward_kernel<T, 1>)
    (out, rstd, inp, weight, N, C, eps, copy16);
  }
  CUDA_CHECK_LAUNCH();
}

size_t rmsnorm_backward_scratch_bytes(int64_t N, int64_t C) {
  return norm_grad_partials_bytes(N, C, /*with_bias=*/false);
}

template <typename T>
void rmsnorm_backward(T* dinp, float* dweight, const T* dout, const T* inp, const T* weight,
                      const float* rstd, int64_t N, int64_t C, void* scratch, size_t scratch_bytes,
                      cudaStream_t stream) {
  check_rows(N, C);
  if (N == 0) return;
  ZERO_CHECK(scratch_bytes >= rmsnorm_backward_scratch_bytes(N, C), "rmsnorm: scratch of ",
             scratch_bytes, " bytes < ", rmsnorm_backward_scratch_bytes(N, C));
  ZERO_CHECK(reinterpret_cast<uintptr_t>(scratch) % alignof(float) == 0,
             "rmsnorm: misaligned scratch");
  constexpr int kPack = kVec16<T>;
  if (C % kPack == 0 && all_pack_aligned<kPack>(dinp, dout, inp, weight)) {
    ZERO_LAUNCH(row_blocks(N), kNormRowWarps * 32, 0, stream,
                rmsnorm_backward_dinp_kernel<T, kPack>)
    (dinp, dout, inp, weight, rstd, N, C);
  } else {
    ZERO_LAUNCH(row_blocks(N), kNormRowWarps * 32, 0, stream, rmsnorm_backward_dinp_kernel<T, 1>)
    (dinp, dout, inp, weight, rstd, N, C);
  }
  CUDA_CHECK_LAUNCH();
  launch_norm_param_grads<T>(dweight, /*dbias=*/nullptr, dout, inp, /*mean=*/nullptr, rstd, N, C,
                             static_cast<float*>(scratch), stream);
}

#define ZERO_INSTANTIATE_RMSNORM_CUDA(T)                                                    \
  template void rmsnorm_forward<T>(T*, float*, const T*, const T*, int64_t, int64_t, float, \
                                   cudaStream_t, Rounded16);                                \
  template void rmsnorm_backward<T>(T*, float*, const T*, const T*, const T*, const float*, \
                                    int64_t, int64_t, void*, size_t, cudaStream_t);
ZERO_INSTANTIATE_RMSNORM_CUDA(float)
ZERO_INSTANTIATE_RMSNORM_CUDA(__nv_bfloat16)
ZERO_INSTANTIATE_RMSNORM_CUDA(__half)
#undef ZERO_INSTANTIATE_RMSNORM_CUDA

}  // namespace zero::kernels::cuda
