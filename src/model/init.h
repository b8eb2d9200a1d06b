// Random initialisation of presets, GPT-2's scheme: weights and embeddings N(0, initializer_range),
// residual output projections N(0, initializer_range / sqrt(2 * n_layer)), biases 0, norm
// weights 1. Every element's value is a pure function of (seed, parameter name, element index), so
// any shard of any unit can be initialised alone and equals a single-rank init with the same seed
// (zero.Init), on the host or on a GPU (model/cuda_init.h), bit for bit (kernels/init/init_math.h).
#pragma once

#include <cstdint>
#include <vector>

#include "model/param_layout.h"

namespace zero::model {

// One piece of a unit range's initial values: `count` elements from `offset` (relative to the
// range's first element) hold `value` (kConstant) or float(std_dev * normal_at(key, first_index +
// j)) (kNormal). Elements no segment covers are 0 (biases, padding).
struct InitSegment {
  enum class Kind { kConstant, kNormal };
  Kind kind = Kind::kConstant;
  int64_t offset = 0;
  int64_t count = 0;
  float value = 0.0f;       // kConstant
  uint64_t key = 0;         // kNormal: the parameter's stream
  int64_t first_index = 0;  // kNormal: the element index within the parameter of offset
  double std_dev = 0.0;     // kNormal
};

// What unit `u`'s flat elements [begin, end) start as: the one statement of the scheme above,
// which the host (init_unit_range) and the GPU (init_unit_range_cuda) both carry out.
std::vector<InitSegment> init_segments(const ModelLayout& layout, int u, uint64_t seed,
                                       int64_t begin, int64_t end);

// Writes the initial values of unit `u`'s flat elements [begin, end) into dst[0 .. end - begin).
// Elements past the unit's numel (padding) are 0.
void init_unit_range(const ModelLayout& layout, int u, uint64_t seed, int64_t begin, int64_t end,
                     float* dst);

}  // namespace zero::model
