// init_unit_range_cuda (cuda_init.h): init_segments carried out by the init kernels, one chunk of
// the range at a time into a device buffer, each chunk copied out to the host.
#include "model/cuda_init.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "core/cuda/cuda_check.h"
#include "kernels/init/init_cuda.h"
#include "model/init.h"

namespace zero::model {

Status init_unit_range_cuda(const ModelLayout& layout, int u, uint64_t seed, int64_t begin,
                            int64_t end, float* dst, int64_t chunk_numel) {
  const int64_t n = end - begin;
  if (n <= 0) return ok_status();
  const int64_t chunk = std::min(n, std::max<int64_t>(chunk_numel, 1));
  const std::vector<InitSegment> segments = init_segments(layout, u, seed, begin, end);
  float* buffer = nullptr;
  const cudaError_t alloc = cudaMalloc(&buffer, static_cast<size_t>(chunk) * sizeof(float));
  if (alloc != cudaSuccess) {
    cudaGetLastError();  // clear the sticky allocation error
    return resource_exhausted(
        "initialising unit {} on the GPU: a buffer of {} floats: {} (the host initialises "
        "without it: set ZERO_INIT_ON_HOST=1)",
        layout.unit(u).name, chunk, cudaGetErrorString(alloc));
  }
  Status status = ok_status();
  // Legacy default stream: the synchronous copy below waits for the kernels before it.
  for (int64_t lo = 0; lo < n && status.ok(); lo += chunk) {
    const int64_t hi = std::min(n, lo + chunk);
    const cudaError_t cleared =
        cudaMemsetAsync(buffer, 0, static_cast<size_t>(hi - lo) * sizeof(float));
    if (cleared != cudaSuccess) {
      status = internal_error("cudaMemsetAsync: {}", cudaGetErrorString(cleared));
      break;
    }
    for (const InitSegment& seg : segments) {
      const int64_t a = std::max(lo, seg.offset), b = std::min(hi, seg.offset + seg.count);
      if (a >= b) continue;
      if (seg.kind == InitSegment::Kind::kConstant) {
        kernels::cuda::fill_constant(buffer + (a - lo), b - a, seg.value, nullptr);
      } else {
        kernels::cuda::fill_scaled_normal(buffer + (a - lo), b - a, seg.key,
                                          seg.first_index + (a - seg.offset), seg.std_dev, nullptr);
      }
    }
    const cudaError_t copied = cudaMemcpy(
        dst + lo, buffer, static_cast<size_t>(hi - lo) * sizeof(float), cudaMemcpyDeviceToHost);
    if (copied != cudaSuccess) {
      status = internal_error("initialising unit {} on the GPU: copying {} floats out: {}",
                              layout.unit(u).name, hi - lo, cudaGetErrorString(copied));
    }
  }
  cudaFree(buffer);
  return status;
}

}  // namespace zero::model
