// The CUDA model's own small kernels, the glue between the kernel library's ops: GPT-2's qkv split
// and merge (a strided column copy), a fill, the loss sum that stays on the device, and a 16-bit
// model's casts (GEMM operand copies, its small parameters widened, the embedding read from 16-bit
// tables). Legend: N rows, B batch, T time, C channels, V vocab. Launchers enqueue on `stream`
// only, never synchronise and never allocate. T16 is __nv_bfloat16 or __half.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"

namespace zero::model::cuda_glue {

// dst[n, 0:width] = src[n, 0:width] for n < N, where rows of dst are dst_row_stride floats apart
// and rows of src src_row_stride apart (e.g. q (N, C) = qkv (N, 3C)[:, 0:C], or back). dst must
// not overlap src.
void copy_columns(float* dst, int64_t dst_row_stride, const float* src, int64_t src_row_stride,
                  int64_t N, int64_t width, cudaStream_t stream);

// x(n) = value.
void fill(float* x, float value, int64_t n, cudaStream_t stream);
// out(n) = in(n) + value (Gemma's (1 + w) norm weights). out may alias in.
void add_scalar(float* out, const float* in, float value, int64_t n, cudaStream_t stream);
// out(n) = a(n) * b(n) (Gemma's GeGLU product and its gradients). out may alias a or b.
void multiply(float* out, const float* a, const float* b, int64_t n, cudaStream_t stream);

// *sum = Σ x(n) in fp64, one block, a fixed summation order (bitwise reproducible). Overwrites
// *sum.
void sum_to_f64(double* sum, const float* x, int64_t n, cudaStream_t stream);

// dst[n, 0:width] = T16(src[n, 0:width]) (round to nearest even) for n < N; rows dst_ld and
// src_ld elements apart. The padding of dst's rows is left as it is.
template <typename T16>
void cast_rows(T16* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t N, int64_t width,
               cudaStream_t stream);

// Up to kMaxWidenSegments ranges of a 16-bit unit widened (exactly) into a compact fp32 buffer:
// dst[dst_offset + i] = float(src[src_offset + i]) for i < numel, each segment.
inline constexpr int kMaxWidenSegments = 16;
struct WidenSegments {
  int count = 0;
  int64_t src_offset[kMaxWidenSegments] = {};
  int64_t dst_offset[kMaxWidenSegments] = {};
  int64_t numel[kMaxWidenSegments] = {};
};
void widen_segments(float* dst, const void* src, DType src_dtype, const WidenSegments& segments,
                    cudaStream_t stream);

// out(B, T, C) = float(wte[tokens[b, t]]) + (wpe ? float(wpe[t]) : 0), the sum in fp32: exactly
// encoder_forward<float> over the widened tables (a token outside [0, V): a NaN row).
void embed_16(float* out, const int32_t* tokens, const void* wte, const void* wpe, DType dtype,
              int64_t B, int64_t T, int64_t C, int64_t V, cudaStream_t stream);

}  // namespace zero::model::cuda_glue
