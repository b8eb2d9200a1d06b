// The per-tile contract of the CPU AdamW versions: one function per instruction set that updates
// elements [begin, end) of a shard with the constants of one update (adamw.h's AdamConstants).
// adam_update (adamw_cpu.cc) runs the scalar one over its tiles; adam_update_simd (adamw_simd.cc)
// picks one at run time.
#pragma once

#include <cstdint>

#include "kernels/adamw/adamw.h"

namespace zero::kernels::cpu::detail {

// Updates elements [begin, end) of `shard`, writing the 16-bit copy of the tile when the shard has
// one. The scalar body (adamw_cpu.cc) is the reference; the SIMD ones (adamw_avx2.cc,
// adamw_avx512.cc, one body in adamw_simd_body.h) are bitwise equal to it.
using AdamTileFn = void (*)(const AdamConstants&, const AdamShard&, int64_t begin, int64_t end);
void adam_tile_scalar(const AdamConstants& p, const AdamShard& s, int64_t b, int64_t e);
void adam_tile_avx2(const AdamConstants& p, const AdamShard& s, int64_t b, int64_t e);
void adam_tile_avx512(const AdamConstants& p, const AdamShard& s, int64_t b, int64_t e);

}  // namespace zero::kernels::cpu::detail
