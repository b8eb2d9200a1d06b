// CUDA twins of the random initialisation's fills (model/init.h): the same values as the host, bit
// for bit (kernels/init/init_math.h). Launchers enqueue on `stream` only and never synchronise.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace zero::kernels::cuda {

// dst[j] = float(std_dev * normal_at(key, first_index + j)), j < n.
void fill_scaled_normal(float* dst, int64_t n, uint64_t key, int64_t first_index, double std_dev,
                        cudaStream_t stream);

// dst[j] = value, j < n.
void fill_constant(float* dst, int64_t n, float value, cudaStream_t stream);

}  // namespace zero::kernels::cuda
