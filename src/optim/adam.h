// The optimizer layer's names for the AdamW kernel's arguments and scalar update, which live in
// kernels/adamw/adamw.h (with the SIMD and CUDA versions beside them). Lamb, OptimizerSpec and the
// engine keep writing optim::AdamArgs / optim::AdamShard / optim::adam_update.
#pragma once

#include "kernels/adamw/adamw.h"

namespace zero::optim {

using kernels::adam_scalars;
using kernels::AdamArgs;
using kernels::AdamScalars;
using kernels::AdamShard;
using kernels::cpu::adam_update;

}  // namespace zero::optim
