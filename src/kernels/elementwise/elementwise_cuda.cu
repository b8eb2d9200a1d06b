// CUDA twins of the elementwise helpers: one grid-stride kernel per op (kernels/cuda_vector.cuh),
// 16-byte vector accesses when the pointers allow them, fp32 arithmetic, one rounding to the
// storage type.

#include "kernels/elementwise/elementwise_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda_vector.cuh"
#include "kernels/dtype_bits.h"

namespace zero::kernels::cuda {
namespace {

template <typename T>
struct AddOp {
  T* out;
  const T* a;
  const T* b;
  template <int kPack>
  __device__ void apply(int64_t i) const {
    float x[kPack], y[kPack];
    load_f32<kPack>(a + i, x);
    load_f32<kPack>(b + i, y);
#pragma unroll
    for (int k = 0; k < kPack; ++k) x[k] += y[k];
    store_f32<kPack>(out + i, x);
  }
};

template <typename T>
struct ScaleOp {
  T* x;
  float s;
  template <int kPack>
  __device__ void apply(int64_t i) const {
    float v[kPack];
    load_f32<kPack>(x + i, v);
#pragma unroll
    for (int k = 0; k < kPack; ++k) v[k] *= s;
    store_f32<kPack>(x + i, v);
  }
};

template <typename T>
struct AccumulateF32Op {
  float* acc;
  const T* x;
  template <int kPack>
  __device__ void apply(int64_t i) const {
    float a[kPack], v[kPack];
    load_f32<kPack>(acc + i, a);
    load_f32<kPack>(x + i, v);
#pragma unroll
    for (int k = 0; k < kPack; ++k) a[k] += v[k];
    store_f32<kPack>(acc + i, a);
  }
};

// Exact conversions through the bit patterns (dtype_bits.h), not the hardware ones: NaN payloads
// must come out as core/dtype.h makes them.
__device__ __forceinline__ float exact_to_f32(float x) { return x; }
__device__ __forceinline__ float exact_to_f32(__nv_bfloat16 x) {
  return bits::bf16_bits_to_f32(__bfloat16_as_ushort(x));
}
__device__ __forceinline__ float exact_to_f32(__half x) {
  return bits::f16_bits_to_f32(__half_as_ushort(x));
}

template <typename T>
__device__ __forceinline__ T exact_from_f32(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __ushort_as_bfloat16(bits::f32_to_bf16_bits(x));
  } else {
    return __ushort_as_half(bits::f32_to_f16_bits(x));
  }
}

template <typename Src, typename Dst>
struct CastOp {
  const Src* src;
  Dst* dst;
  template <int kPack>
  __device__ void apply(int64_t i) const {
    const Pack<Src, kPack> in = *reinterpret_cast<const Pack<Src, kPack>*>(src + i);
    Pack<Dst, kPack> out;
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      if constexpr (std::is_same_v<Src, Dst>) {
        out.v[k] = in.v[k];
      } else {
        out.v[k] = exact_from_f32<Dst>(exact_to_f32(in.v[k]));
      }
    }
    *reinterpret_cast<Pack<Dst, kPack>*>(dst + i) = out;
  }
};

// acc += float(T(x)): an fp32 gradient rounded to the model dtype T first, as a T backward would
// have produced it, then accumulated in fp32 (one pass instead of a cast and an accumulate).
template <typename T>
struct AccumulateRoundedOp {
  float* acc;
  const float* x;
  template <int kPack>
  __device__ void apply(int64_t i) const {
    float a[kPack], v[kPack];
    load_f32<kPack>(acc + i, a);
    load_f32<kPack>(x + i, v);
#pragma unroll
    for (int k = 0; k < kPack; ++k) a[k] += exact_to_f32(exact_from_f32<T>(v[k]));
    store_f32<kPack>(acc + i, a);
  }
};

// x = float(T(x)), in place.
template <typename T>
struct RoundToOp {
  float* x;
  template <int kPack>
  __device__ void apply(int64_t i) const {
    float v[kPack];
    load_f32<kPack>(x + i, v);
#pragma unroll
    for (int k = 0; k < kPack; ++k) v[k] = exact_to_f32(exact_from_f32<T>(v[k]));
    store_f32<kPack>(x + i, v);
  }
};

// Mixed-type ops move 4 elements per access: 16 bytes of float, 8 of a 16-bit type.
constexpr int kMixedPack = 4;

}  // namespace

template <typename T>
void add(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream) {
  launch_elementwise<kVec16<T>>(n, AddOp<T>{out, a, b}, stream, out, a, b);
}

template <typename T>
void accumulate(T* acc, const T* x, int64_t n, cudaStream_t stream) {
  launch_elementwise<kVec16<T>>(n, AddOp<T>{acc, acc, x}, stream, acc, x);
}

template <typename T>
void scale(T* x, float s, int64_t n, cudaStream_t stream) {
  launch_elementwise<kVec16<T>>(n, ScaleOp<T>{x, s}, stream, x);
}

template <typename T>
void accumulate_f32(float* acc, const T* x, int64_t n, cudaStream_t stream) {
  launch_elementwise<kMixedPack>(n, AccumulateF32Op<T>{acc, x}, stream, acc, x);
}

template <typename T>
void accumulate_rounded(float* acc, const float* x, int64_t n, cudaStream_t stream) {
  launch_elementwise<kMixedPack>(n, AccumulateRoundedOp<T>{acc, x}, stream, acc, x);
}

template <typename T>
void round_to(float* x, int64_t n, cudaStream_t stream) {
  launch_elementwise<kMixedPack>(n, RoundToOp<T>{x}, stream, x);
}

template <typename Src, typename Dst>
void cast(const Src* src, Dst* dst, int64_t n, cudaStream_t stream) {
  launch_elementwise<kMixedPack>(n, CastOp<Src, Dst>{src, dst}, stream, src, dst);
}

#define ZERO_INSTANTIATE_ARITHMETIC(T)                                                   \
  template void add<T>(T*, const T*, const T*, int64_t, cudaStream_t);                   \
  template void accumulate<T>(T*, const T*, int64_t, cudaStream_t);                      \
  template void scale<T>(T*, float, int64_t, cudaStream_t);                              \
  template void accumulate_f32<T>(float*, const T*, int64_t, cudaStream_t);              \
  template void cast<T, float>(const T*, float*, int64_t, cudaStream_t);                 \
  template void cast<T, __nv_bfloat16>(const T*, __nv_bfloat16*, int64_t, cudaStream_t); \
  template void cast<T, __half>(const T*, __half*, int64_t, cudaStream_t);
ZERO_INSTANTIATE_ARITHMETIC(float)
ZERO_INSTANTIATE_ARITHMETIC(__nv_bfloat16)
ZERO_INSTANTIATE_ARITHMETIC(__half)
#undef ZERO_INSTANTIATE_ARITHMETIC
template void accumulate_rounded<__nv_bfloat16>(float*, const float*, int64_t, cudaStream_t);
template void accumulate_rounded<__half>(float*, const float*, int64_t, cudaStream_t);
template void round_to<__nv_bfloat16>(float*, int64_t, cudaStream_t);
template void round_to<__half>(float*, int64_t, cudaStream_t);

}  // namespace zero::kernels::cuda
