// Elementwise helpers: residual adds, accumulation, scaling, copies with casts.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace zero::kernels::cpu {

// out = a + b (out may alias a or b).
template <typename T>
void add(T* out, const T* a, const T* b, int64_t n);

// acc += x.
template <typename T>
void accumulate(T* acc, const T* x, int64_t n);

// x *= s.
template <typename T>
void scale(T* x, T s, int64_t n);

// Converting copies between storage dtypes (OpenMP-parallel versions of core/dtype.h).
void cast_from_f32(const float* src, void* dst, DType dst_dtype, int64_t n);
void cast_to_f32(const void* src, DType src_dtype, float* dst, int64_t n);
// dst[i] = round_to_dtype(src[i], dtype), OpenMP-parallel; dst may alias src.
void round_to_dtype(const float* src, float* dst, DType dtype, int64_t n);
// acc[i] += round_to_dtype(src[i], dtype), OpenMP-parallel.
void accumulate_rounded(float* acc, const float* src, DType dtype, int64_t n);

}  // namespace zero::kernels::cpu
