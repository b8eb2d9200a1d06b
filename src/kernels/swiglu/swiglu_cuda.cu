// CUDA twin of SwiGLU: elementwise over n with 16-byte vector accesses when the pointers allow
// them; the formulas are swiglu_math.h's, shared with the host tests.

#include "kernels/swiglu/swiglu_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_vector.cuh"
#include "kernels/swiglu/swiglu_math.h"

namespace zero::kernels::cuda {
namespace {

template <typename T>
struct SwigluForwardOp {
  T* out;
  const T* gate;
  const T* up;
  Rounded16 copy16;
  template <int kPack>
  __device__ void apply(int64_t i) const {
    float g[kPack], u[kPack];
    load_f32<kPack>(gate + i, g);
    load_f32<kPack>(up + i, u);
#pragma unroll
    for (int k = 0; k < kPack; ++k) g[k] = math::swiglu(g[k], u[k]);
    store_f32<kPack>(out + i, g);
    if (copy16.data != nullptr) {
#pragma unroll
      for (int k = 0; k < kPack; ++k) store_rounded16(copy16, rounded16_index(copy16, i + k), g[k]);
    }
  }
};

template <typename T>
struct SwigluBackwardOp {
  T* dgate;
  T* dup;
  const T* dout;
  const T* gate;
  const T* up;
  template <int kPack>
  __device__ void apply(int64_t i) const {
    float g[kPack], u[kPack], d[kPack], dg[kPack], du[kPack];
    load_f32<kPack>(gate + i, g);
    load_f32<kPack>(up + i, u);
    load_f32<kPack>(dout + i, d);
    load_f32<kPack>(dgate + i, dg);
    load_f32<kPack>(dup + i, du);
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      const math::SwigluGrad grad = math::swiglu_grad(g[k], u[k], d[k]);
      dg[k] += grad.dgate;
      du[k] += grad.dup;
    }
    store_f32<kPack>(dgate + i, dg);
    store_f32<kPack>(dup + i, du);
  }
};

}  // namespace

template <typename T>
void swiglu_forward(T* out, const T* gate, const T* up, int64_t n, cudaStream_t stream,
                    Rounded16 copy16) {
  launch_elementwise<kVec16<T>>(n, SwigluForwardOp<T>{out, gate, up, copy16}, stream, out, gate,
                                up);
}

template <typename T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int64_t n,
                     cudaStream_t stream) {
  launch_elementwise<kVec16<T>>(n, SwigluBackwardOp<T>{dgate, dup, dout, gate, up}, stream, dgate,
                                dup, dout, gate, up);
}

template void swiglu_forward<float>(float*, const float*, const float*, int64_t, cudaStream_t,
                                    Rounded16);
template void swiglu_forward<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*,
                                            const __nv_bfloat16*, int64_t, cudaStream_t, Rounded16);
template void swiglu_forward<__half>(__half*, const __half*, const __half*, int64_t, cudaStream_t,
                                     Rounded16);
template void swiglu_backward<float>(float*, float*, const float*, const float*, const float*,
                                     int64_t, cudaStream_t);
template void swiglu_backward<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*, const __nv_bfloat16*,
                                             const __nv_bfloat16*, const __nv_bfloat16*, int64_t,
                                             cudaStream_t);
template void swiglu_backward<__half>(__half*, __half*, const __half*, const __half*, const __half*,
                                      int64_t, cudaStream_t);

}  // namespace zero::kernels::cuda
