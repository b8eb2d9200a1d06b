// CPU twins of the elementwise helpers: add / accumulate / scale, and dtype-converting copies
// split into fixed chunks that OpenMP threads convert with core/dtype.h's bulk routines.
#include <cstdint>

#include "core/dtype.h"
#include "kernels/elementwise/elementwise.h"

namespace zero::kernels::cpu {
namespace {

constexpr int64_t kCastChunk = 1 << 14;  // elements per OpenMP work item

// fn(begin, count) over [0, n) in kCastChunk pieces, one OpenMP work item each (no parallel region
// for a single piece).
template <typename Fn>
void for_each_chunk(int64_t n, Fn&& fn) {
  const int64_t num_chunks = (n + kCastChunk - 1) / kCastChunk;
#pragma omp parallel for if (num_chunks > 1)
  for (int64_t k = 0; k < num_chunks; ++k) {
    const int64_t begin = k * kCastChunk;
    fn(begin, static_cast<size_t>(n - begin < kCastChunk ? n - begin : kCastChunk));
  }
}

}  // namespace

template <typename T>
void add(T* out, const T* a, const T* b, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void accumulate(T* acc, const T* x, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

template <typename T>
void scale(T* x, T s, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void cast_from_f32(const float* src, void* dst, DType dst_dtype, int64_t n) {
  const size_t elem_bytes = dtype_bytes(dst_dtype);
  for_each_chunk(n, [&](int64_t begin, size_t count) {
    convert_from_f32(src + begin, static_cast<char*>(dst) + begin * elem_bytes, dst_dtype, count);
  });
}

void cast_to_f32(const void* src, DType src_dtype, float* dst, int64_t n) {
  const size_t elem_bytes = dtype_bytes(src_dtype);
  for_each_chunk(n, [&](int64_t begin, size_t count) {
    convert_to_f32(static_cast<const char*>(src) + begin * elem_bytes, src_dtype, dst + begin,
                   count);
  });
}

void round_to_dtype(const float* src, float* dst, DType dtype, int64_t n) {
  for_each_chunk(n, [&](int64_t begin, size_t count) {
    zero::round_to_dtype(src + begin, dst + begin, count, dtype);
  });
}

void accumulate_rounded(float* acc, const float* src, DType dtype, int64_t n) {
  for_each_chunk(n, [&](int64_t begin, size_t count) {
    zero::accumulate_rounded(acc + begin, src + begin, count, dtype);
  });
}

template void add<float>(float*, const float*, const float*, int64_t);
template void add<double>(double*, const double*, const double*, int64_t);
template void accumulate<float>(float*, const float*, int64_t);
template void accumulate<double>(double*, const double*, int64_t);
template void scale<float>(float*, float, int64_t);
template void scale<double>(double*, double, int64_t);

}  // namespace zero::kernels::cpu
