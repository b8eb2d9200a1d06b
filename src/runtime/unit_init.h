// UnitInitFn: how a model's initial values reach whoever holds them (the training Engine's ZeRO
// state, or ModelWeights for inference) without the model ever being materialised whole.
#pragma once

#include <cstdint>
#include <functional>

#include "core/status.h"

namespace zero::runtime {

// Fills elements [begin, end) of unit u's flat fp32 buffer (zeros past the unit's numel): what
// model::init_unit_range and HfWeightReader::read_unit_range do. Under ZeRO each rank asks only for
// its partition, so a model is never materialised whole on one rank.
using UnitInitFn = std::function<Status(int u, int64_t begin, int64_t end, float* dst)>;

}  // namespace zero::runtime
