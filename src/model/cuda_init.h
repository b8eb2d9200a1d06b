// The random initialisation (model/init.h) computed on the GPU: a 13B preset's 52 GB of fp32
// values are a few seconds of copies instead of half a minute of host math per rank.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "model/param_layout.h"

namespace zero::model {

// init_unit_range's values, bit for bit, computed on the current CUDA device and copied into host
// `dst[0 .. end - begin)` (pageable or pinned). Uses a device buffer of at most `chunk_numel`
// floats; returns when dst is written.
Status init_unit_range_cuda(const ModelLayout& layout, int u, uint64_t seed, int64_t begin,
                            int64_t end, float* dst, int64_t chunk_numel = int64_t{1} << 24);

}  // namespace zero::model
