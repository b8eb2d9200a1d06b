// The per-tile contract of the CPU AdamW versions: the constants of one update, and one function
// per instruction set that updates elements [begin, end) of a shard. adam_update (adamw_cpu.cc)
// runs the scalar one over its tiles; adam_update_simd (adamw_simd.cc) picks one at run time.
#pragma once

#include <cstdint>

#include "kernels/adamw/adamw.h"

namespace zero::kernels::cpu::detail {

// Per-update constants shared by the ISA kernels.
struct AdamTileParams {
  float beta1, beta2, one_minus_beta1, one_minus_beta2, eps, grad_scale;
  float step_size, inv_sqrt_bc2, decoupled_decay, l2_decay;
  bool l2, decoupled;  // decay terms are compiled out when zero (DeepSpeed branches on wd > 0)
};

// The constants of one update of `args` (adam_scalars rounded to fp32 once).
AdamTileParams adam_tile_params(const AdamArgs& args, float grad_scale);

// Updates elements [begin, end) of `shard`, writing the 16-bit copy of the tile when the shard has
// one. The scalar body (adamw_cpu.cc) is the reference; the SIMD ones (adamw_avx2.cc,
// adamw_avx512.cc, one body in adamw_simd_body.h) are bitwise equal to it.
using AdamTileFn = void (*)(const AdamTileParams&, const AdamShard&, int64_t begin, int64_t end);
void adam_tile_scalar(const AdamTileParams& p, const AdamShard& s, int64_t b, int64_t e);
void adam_tile_avx2(const AdamTileParams& p, const AdamShard& s, int64_t b, int64_t e);
void adam_tile_avx512(const AdamTileParams& p, const AdamShard& s, int64_t b, int64_t e);

}  // namespace zero::kernels::cpu::detail
