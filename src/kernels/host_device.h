// ZERO_HOST_DEVICE marks small scalar math shared by CUDA kernels and host code, so host tests can
// check the exact formulas the kernels run. nvcc compiles it for both sides; g++ sees an inline.
#pragma once

#if defined(__CUDACC__)
#define ZERO_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define ZERO_HOST_DEVICE inline
#endif
