// Forwarding header: the CUDA AdamW moved to kernels/adamw/adamw_cuda.h (kernels::cuda). Kept so
// device/cuda_backend.cc compiles unchanged; new code includes the kernel header.
#pragma once

#include "kernels/adamw/adamw_cuda.h"
#include "optim/adam.h"

namespace zero::optim::cuda {

using kernels::cuda::adam_update;

}  // namespace zero::optim::cuda
