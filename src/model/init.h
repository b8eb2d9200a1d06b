// Random initialisation of presets, GPT-2's scheme: weights and embeddings N(0, initializer_range),
// residual output projections N(0, initializer_range / sqrt(2 * n_layer)), biases 0, norm
// weights 1. Every element's value is a pure function of (seed, parameter name, element index), so
// any shard of any unit can be initialised alone and equals a single-rank init with the same seed
// (zero.Init).
#pragma once

#include <cstdint>

#include "model/param_layout.h"

namespace zero::model {

// Writes the initial values of unit `u`'s flat elements [begin, end) into dst[0 .. end - begin).
// Elements past the unit's numel (padding) are 0.
void init_unit_range(const ModelLayout& layout, int u, uint64_t seed, int64_t begin, int64_t end,
                     float* dst);

}  // namespace zero::model
