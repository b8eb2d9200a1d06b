// The reduction semantics of the communicators, as plain loops: 16-bit (bf16/f16) values are
// widened to fp32, reduced in fp32 and rounded to the storage type once (round to nearest even).
// The MPI backend implements exactly this (fp32 conversion buffers); tests use these loops as the
// oracle.
#pragma once

#include <cstddef>
#include <span>

#include "comm/communicator.h"
#include "core/dtype.h"

namespace zero {

// out[i] = round_dtype(op_r float(inputs[r][i])) for i < numel, with the fp32 reduction done in
// rank order r = 0, 1, ... . `inputs` and `out` hold numel elements of `dtype`; `out` may alias
// inputs[0].
void reduce_reference(std::span<const void* const> inputs, void* out, size_t numel, DType dtype,
                      ReduceOp op);

// acc[i] = op(acc[i], float(src[i])): one fp32 accumulation step.
void accumulate_f32(const float* src, float* acc, size_t numel, ReduceOp op);

}  // namespace zero
