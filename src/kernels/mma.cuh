// One warp's tensor-core product D = A·B + D, m16n8k16, 16-bit inputs (bf16 or fp16), fp32
// accumulators: PTX `mma.sync` on a GPU (sm_80+), the same arithmetic through warp shuffles on the
// CPU emulator (src/emu/), so kernels built on it run in CI too.
//
// Fragments as the PTX ISA lays them out, lane = 4 g + t (g = lane / 4, t = lane % 4); each
// uint32_t holds two 16-bit elements, the lower index in the low half:
//   a[0] = A[g][2t, 2t+1]      a[1] = A[g+8][2t, 2t+1]   a[2] = A[g][2t+8, 2t+9]   a[3] =
//   A[g+8][2t+8, 2t+9] b[0] = B[2t, 2t+1][g]      b[1] = B[2t+8, 2t+9][g]   (B is 16 x 8: "col" =
//   the k index runs along a column) d[0], d[1] = D[g][2t, 2t+1]                          d[2],
//   d[3] = D[g+8][2t, 2t+1]
// The D layout of one 16 x 8 tile pair is the A layout of a 16 x 16 operand, so a product's
// result (rounded to 16 bits) feeds the next product with no shuffles (flash attention's P·V).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda_vector.cuh"

namespace zero::kernels::cuda {

// Two 16-bit values as one fragment register (lo in the low half).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  const T l = from_f32<T>(lo), h = from_f32<T>(hi);
  uint16_t lb, hb;
  memcpy(&lb, &l, sizeof(lb));
  memcpy(&hb, &h, sizeof(hb));
  return static_cast<uint32_t>(lb) | (static_cast<uint32_t>(hb) << 16);
}

template <typename T>
__device__ __forceinline__ float unpack_lo(uint32_t r) {
  const uint16_t bits = static_cast<uint16_t>(r & 0xffffu);
  T v;
  memcpy(static_cast<void*>(&v), &bits, sizeof(v));
  return to_f32(v);
}

template <typename T>
__device__ __forceinline__ float unpack_hi(uint32_t r) {
  return unpack_lo<T>(r >> 16);
}

template <typename T>
__device__ __forceinline__ void mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2]) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>);
#if defined(ZERO_CUDA_EMU)
  // Every lane gathers its two rows of A and its two columns of B from the lanes holding them
  // (three warp-wide exchanges), then forms its four dot products in fp32 (k in order; the
  // hardware's order is unspecified).
  const auto a01 = ::zero::emu::warp_all_gather(a[0] | (static_cast<uint64_t>(a[1]) << 32));
  const auto a23 = ::zero::emu::warp_all_gather(a[2] | (static_cast<uint64_t>(a[3]) << 32));
  const auto b01 = ::zero::emu::warp_all_gather(b[0] | (static_cast<uint64_t>(b[1]) << 32));
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4, t = lane % 4;
  float arow[2][16], bcol[2][16];
  const auto unpack4 = [](uint64_t lo_hi, float* lo_row, float* hi_row, int col) {
    const uint32_t lo = static_cast<uint32_t>(lo_hi), hi = static_cast<uint32_t>(lo_hi >> 32);
    lo_row[col] = unpack_lo<T>(lo), lo_row[col + 1] = unpack_hi<T>(lo);
    hi_row[col] = unpack_lo<T>(hi), hi_row[col + 1] = unpack_hi<T>(hi);
  };
  for (int src_t = 0; src_t < 4; ++src_t) {
    const int src = 4 * g + src_t;
    unpack4(a01[src], arow[0], arow[1], 2 * src_t);      // A[g][2st..], A[g+8][2st..]
    unpack4(a23[src], arow[0], arow[1], 2 * src_t + 8);  // the same at columns + 8
    for (int j = 0; j < 2; ++j) {
      // b[0] = B[2st..][n], b[1] = B[2st+8..][n] of the lanes holding column n = 2t + j.
      float lo_part[16], hi_part[16];
      unpack4(b01[4 * (2 * t + j) + src_t], lo_part, hi_part, 0);
      bcol[j][2 * src_t] = lo_part[0], bcol[j][2 * src_t + 1] = lo_part[1];
      bcol[j][2 * src_t + 8] = hi_part[0], bcol[j][2 * src_t + 9] = hi_part[1];
    }
  }
  for (int i = 0; i < 4; ++i) {
    float sum = d[i];
    for (int k = 0; k < 16; ++k) sum += arow[i / 2][k] * bcol[i % 2][k];
    d[i] = sum;
  }
#else
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#endif
}

}  // namespace zero::kernels::cuda
