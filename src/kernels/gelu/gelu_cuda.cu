// CUDA twin of GELU (tanh approximation): elementwise over n with 16-byte vector accesses when the
// pointers allow them; the formula is gelu_math.h's, shared with the host tests.

#include "kernels/gelu/gelu_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_vector.cuh"
#include "kernels/gelu/gelu_math.h"

namespace zero::kernels::cuda {
namespace {

template <typename T>
struct GeluForwardOp {
  T* out;
  const T* inp;
  Rounded16 copy16;
  template <int kPack>
  __device__ void apply(int64_t i) const {
    float x[kPack];
    load_f32<kPack>(inp + i, x);
#pragma unroll
    for (int k = 0; k < kPack; ++k) x[k] = math::gelu_tanh(x[k]);
    store_f32<kPack>(out + i, x);
    if (copy16.data != nullptr) {
#pragma unroll
      for (int k = 0; k < kPack; ++k) store_rounded16(copy16, rounded16_index(copy16, i + k), x[k]);
    }
  }
};

template <typename T>
struct GeluBackwardOp {
  T* dinp;
  const T* inp;
  const T* dout;
  template <int kPack>
  __device__ void apply(int64_t i) const {
    float x[kPack], g[kPack], d[kPack];
    load_f32<kPack>(inp + i, x);
    load_f32<kPack>(dout + i, g);
    load_f32<kPack>(dinp + i, d);
#pragma unroll
    for (int k = 0; k < kPack; ++k) d[k] += math::gelu_tanh_grad(x[k]) * g[k];
    store_f32<kPack>(dinp + i, d);
  }
};

}  // namespace

template <typename T>
void gelu_forward(T* out, const T* inp, int64_t n, cudaStream_t stream, Rounded16 copy16) {
  launch_elementwise<kVec16<T>>(n, GeluForwardOp<T>{out, inp, copy16}, stream, out, inp);
}

template <typename T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int64_t n, cudaStream_t stream) {
  launch_elementwise<kVec16<T>>(n, GeluBackwardOp<T>{dinp, inp, dout}, stream, dinp, inp, dout);
}

template void gelu_forward<float>(float*, const float*, int64_t, cudaStream_t, Rounded16);
template void gelu_forward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, int64_t,
                                          cudaStream_t, Rounded16);
template void gelu_forward<__half>(__half*, const __half*, int64_t, cudaStream_t, Rounded16);
template void gelu_backward<float>(float*, const float*, const float*, int64_t, cudaStream_t);
template void gelu_backward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*,
                                           const __nv_bfloat16*, int64_t, cudaStream_t);
template void gelu_backward<__half>(__half*, const __half*, const __half*, int64_t, cudaStream_t);

}  // namespace zero::kernels::cuda
