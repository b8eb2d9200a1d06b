// CUDA twins of the random initialisation's fills: one thread per element (grid-stride), the
// numbers init_math.h's, shared with the host.

#include "kernels/init/init_cuda.h"

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda_vector.cuh"
#include "kernels/init/init_math.h"

namespace zero::kernels::cuda {
namespace {

struct ScaledNormalOp {
  float* dst;
  uint64_t key;
  int64_t first_index;
  double std_dev;
  template <int kPack>
  __device__ void apply(int64_t i) const {
#pragma unroll
    for (int k = 0; k < kPack; ++k) {
      dst[i + k] = init::scaled_normal_at(key, first_index + i + k, std_dev);
    }
  }
};

struct ConstantOp {
  float* dst;
  float value;
  template <int kPack>
  __device__ void apply(int64_t i) const {
    float v[kPack];
#pragma unroll
    for (int k = 0; k < kPack; ++k) v[k] = value;
    store_f32<kPack>(dst + i, v);
  }
};

}  // namespace

void fill_scaled_normal(float* dst, int64_t n, uint64_t key, int64_t first_index, double std_dev,
                        cudaStream_t stream) {
  // One element per thread: the double-precision math dominates, not the 4-byte store.
  launch_for_each_pack<1>(n, ScaledNormalOp{dst, key, first_index, std_dev}, stream);
}

void fill_constant(float* dst, int64_t n, float value, cudaStream_t stream) {
  launch_elementwise<kVec16<float>>(n, ConstantOp{dst, value}, stream, dst);
}

}  // namespace zero::kernels::cuda
