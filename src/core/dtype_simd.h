// Bulk bf16 conversions, one set per instruction set: dtype.cc dispatches to the widest one the CPU
// has; dtype_simd_test.cc checks every set bitwise against the scalar one (float_to_bf16: round to
// nearest even, NaN keeps sign and payload with the quiet bit set; bf16 -> float exact).
#pragma once

#include <cstddef>
#include <cstdint>

namespace zero::detail {

enum class DTypeIsa { kScalar, kAvx2, kAvx512 };
// Whether the CPU (and the OS, for the register state) supports `isa`.
bool dtype_isa_supported(DTypeIsa isa);

// REQUIRES for every function: the CPU supports the set's instruction set.
struct Bf16BulkFns {
  // dst[i] = float_to_bf16(src[i]).bits
  void (*from_f32)(const float* src, uint16_t* dst, size_t n);
  // dst[i] = bf16_to_float(src[i])
  void (*to_f32)(const uint16_t* src, float* dst, size_t n);
  // dst[i] = round_to_bf16(src[i]); dst may alias src.
  void (*round)(const float* src, float* dst, size_t n);
  // acc[i] += round_to_bf16(src[i]) (one fp32 add, as in the scalar loop).
  void (*accumulate_rounded)(float* acc, const float* src, size_t n);
};
const Bf16BulkFns& bf16_bulk_fns(DTypeIsa isa);
// The best set for this CPU (chosen once).
const Bf16BulkFns& bf16_bulk_best();

extern const Bf16BulkFns kBf16BulkAvx512;  // dtype_avx512.cc
extern const Bf16BulkFns kBf16BulkAvx2;    // dtype_avx2.cc

}  // namespace zero::detail
