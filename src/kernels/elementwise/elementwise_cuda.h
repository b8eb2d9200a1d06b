// CUDA twins of the elementwise helpers (elementwise.h): add, accumulate, scale in the storage
// dtype T with fp32 arithmetic, fp32 accumulation of T values, and dtype casts bitwise identical to
// core/dtype.h. Legend: n = elements. Every launcher enqueues on `stream` only and never syncs.
// Aliasing: an output may be the same array as an input (same index), never a shifted view of it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace zero::kernels::cuda {

// out(n) = a + b, computed in fp32 and rounded once to T. out may alias a or b.
template <typename T>
void add(T* out, const T* a, const T* b, int64_t n, cudaStream_t stream);

// acc(n) += x, in fp32, rounded once to T.
template <typename T>
void accumulate(T* acc, const T* x, int64_t n, cudaStream_t stream);

// x(n) *= s, in fp32 (s is not rounded to T), rounded once to T.
template <typename T>
void scale(T* x, float s, int64_t n, cudaStream_t stream);

// acc(n) += float(x): fp32 gradient accumulation of T-valued gradients.
template <typename T>
void accumulate_f32(float* acc, const T* x, int64_t n, cudaStream_t stream);

// acc(n) += float(T(x)): x (fp32) rounded to T (nearest even, as core/dtype.h) and accumulated in
// fp32, bitwise the host's accumulate_rounded. T in {__nv_bfloat16, __half}.
template <typename T>
void accumulate_rounded(float* acc, const float* x, int64_t n, cudaStream_t stream);

// x(n) = float(T(x)) in place, bitwise the host's round_to_dtype. T in {__nv_bfloat16, __half}.
template <typename T>
void round_to(float* x, int64_t n, cudaStream_t stream);

// dst(n) = src converted to Dst exactly as convert_from_f32(convert_to_f32(src)) on the host:
// 16-bit -> float exact, float -> 16-bit round to nearest even, NaN -> NaN (f16: canonical quiet
// NaN; bf16: payload kept, quiet bit set), overflow -> inf. Src == Dst copies bits unchanged.
// Src, Dst in {float, __nv_bfloat16, __half}. dst must not overlap src.
template <typename Src, typename Dst>
void cast(const Src* src, Dst* dst, int64_t n, cudaStream_t stream);

}  // namespace zero::kernels::cuda
