// The dense layer's own CUDA kernels: bias broadcast, GELU after the GEMM, the deterministic
// bias gradient (per-chunk column sums, then a fixed-order sum over chunks), and the reference GEMM
// (MatmulContext's fallback where cuBLASLt has no algorithm, and the emulator's GEMM).
// Legend: N = rows (B*T), OC = out_features; row-major (N, OC) activations.

#include "kernels/matmul/matmul_epilogue_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/launch.h"
#include "kernels/cuda_vector.cuh"
#include "kernels/gelu/gelu_math.h"
#include "kernels/matmul/matmul_cuda.h"

namespace zero::kernels::cuda {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- bias broadcast

constexpr int kBroadcastThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kBroadcastThreads)
    broadcast_bias_kernel(T* out, const T* bias, int64_t N, int64_t OC) {
  const int64_t col_stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t row = blockIdx.y; row < N; row += gridDim.y) {
    T* out_row = out + row * OC;  // (OC)
    for (int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; col < OC;
         col += col_stride) {
      out_row[col] = bias != nullptr ? bias[col] : from_f32<T>(0.0f);
    }
  }
}

// ---- GELU after the GEMM

template <typename T>
struct GeluOp {
  T* out;
  const T* pre;
  template <int kPack>
  __device__ void apply(int64_t i) const {
    float x[kPack];
    load_f32<kPack>(pre + i, x);
#pragma unroll
    for (int k = 0; k < kPack; ++k) x[k] = math::gelu_tanh(x[k]);
    store_f32<kPack>(out + i, x);
  }
};

// ---- bias gradient

// A block covers kBiasGradCols consecutive columns (one warp reads one row's slice: coalesced)
// and kBiasGradRowThreads rows at a time.
constexpr int kBiasGradCols = 32;
constexpr int kBiasGradRowThreads = 8;
// Chunks are added until about this many blocks run (a few waves on any current GPU), but every
// chunk keeps at least kBiasGradMinRowsPerChunk rows (the last one excepted).
constexpr int64_t kBiasGradTargetBlocks = 1024;
constexpr int64_t kBiasGradMinRowsPerChunk = 64;
constexpr int64_t kMaxGridY = 65535;
constexpr int kBiasGradFinishThreads = 256;

// Block (x, y) sums rows [y * rows_per_chunk, min(N, (y + 1) * rows_per_chunk)) of its columns:
// thread row ty takes rows ty, ty + 8, ... in order, then thread row 0 adds the 8 partial sums in
// order. With one chunk (gridDim.y == 1) the sum goes straight into dbias; otherwise into
// partials(chunks, OC).
template <typename T>
__global__ void __launch_bounds__(kBiasGradCols* kBiasGradRowThreads)
    bias_grad_chunk_kernel(float* dbias, float* partials, const T* dout, int64_t N, int64_t OC,
                           int64_t rows_per_chunk) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kBiasGradCols + tx;
  const int64_t row_begin = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t row_end = min(N, row_begin + rows_per_chunk);
  float sum = 0.0f;
  if (col < OC) {
    for (int64_t row = row_begin + ty; row < row_end; row += kBiasGradRowThreads) {
      sum += to_f32(dout[row * OC + col]);
    }
  }
  __shared__ float sums[kBiasGradRowThreads][kBiasGradCols];
  sums[ty][tx] = sum;
  // Why: thread row 0 reads the other thread rows' sums.
  __syncthreads();
  if (ty == 0 && col < OC) {
    float total = 0.0f;
#pragma unroll
    for (int j = 0; j < kBiasGradRowThreads; ++j) total += sums[j][tx];
    if (gridDim.y == 1) {
      dbias[col] += total;
    } else {
      partials[static_cast<int64_t>(blockIdx.y) * OC + col] = total;
    }
  }
}

// dbias(OC) += Σ_chunks partials(chunks, OC), chunks in order.
__global__ void __launch_bounds__(kBiasGradFinishThreads)
    bias_grad_finish_kernel(float* dbias, const float* partials, int64_t OC, int64_t chunks) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; col < OC;
       col += stride) {
    float total = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) total += partials[c * OC + col];
    dbias[col] += total;
  }
}

// ---- reference GEMM (column-major, as ColumnMajorGemm): D = alpha op(A) op(B) + beta D + bias

constexpr int kGemmTile = 16;

template <typename TA, typename TD>
__global__ void __launch_bounds__(kGemmTile* kGemmTile)
    reference_gemm_kernel(ColumnMajorGemm g, const TA* a, const TA* b, TD* d, const TD* bias,
                          float alpha, float beta) {
  __shared__ float a_s[kGemmTile][kGemmTile + 1];  // a_s[l][i] = op(A)(i0 + i, l0 + l)
  __shared__ float b_s[kGemmTile][kGemmTile + 1];  // b_s[j][l] = op(B)(l0 + l, j0 + j)
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * kGemmTile;
  const int64_t i = i0 + tx;
  for (int64_t j0 = static_cast<int64_t>(blockIdx.y) * kGemmTile; j0 < g.n;
       j0 += static_cast<int64_t>(gridDim.y) * kGemmTile) {
    const int64_t j = j0 + ty;
    float acc = 0.0f;
    for (int64_t l0 = 0; l0 < g.k; l0 += kGemmTile) {
      {
        const int64_t ii = i0 + tx, ll = l0 + ty;
        a_s[ty][tx] = ii < g.m && ll < g.k
                          ? to_f32(g.transpose_a ? a[ll + ii * g.lda] : a[ii + ll * g.lda])
                          : 0.0f;
      }
      {
        const int64_t ll = l0 + tx, jj = j0 + ty;
        b_s[ty][tx] = ll < g.k && jj < g.n
                          ? to_f32(g.transpose_b ? b[jj + ll * g.ldb] : b[ll + jj * g.ldb])
                          : 0.0f;
      }
      // Why: both tiles are complete before any thread reads them.
      __syncthreads();
#pragma unroll
      for (int l = 0; l < kGemmTile; ++l) acc += a_s[l][tx] * b_s[ty][l];
      // Why: every thread has read the tiles before the next iteration overwrites them.
      __syncthreads();
    }
    if (i < g.m && j < g.n) {
      TD* out = d + i + j * g.ldd;
      float v = alpha * acc;
      if (beta != 0.0f) v += beta * to_f32(*out);  // beta = 0 never reads D (it may be garbage)
      if (bias != nullptr) v += to_f32(bias[i]);
      *out = from_f32<TD>(v);
    }
  }
}

template <typename TA, typename TD>
void launch_reference_gemm(const GemmArgs& args, cudaStream_t stream) {
  const ColumnMajorGemm& g = args.shape;
  const dim3 threads(kGemmTile, kGemmTile);
  const dim3 blocks(static_cast<unsigned>(ceil_div(g.m, kGemmTile)),
                    static_cast<unsigned>(std::min<int64_t>(ceil_div(g.n, kGemmTile), kMaxGridY)));
  ZERO_LAUNCH(blocks, threads, 0, stream, reference_gemm_kernel<TA, TD>)
  (g, static_cast<const TA*>(args.a), static_cast<const TA*>(args.b), static_cast<TD*>(args.d),
   static_cast<const TD*>(args.bias), args.alpha, args.beta);
  CUDA_CHECK_LAUNCH();
}

template <typename TA>
void reference_gemm_for(const GemmArgs& args, cudaStream_t stream) {
  switch (args.d_dtype) {
    case DType::kF32: launch_reference_gemm<TA, float>(args, stream); return;
    case DType::kBF16: launch_reference_gemm<TA, __nv_bfloat16>(args, stream); return;
    case DType::kF16: launch_reference_gemm<TA, __half>(args, stream); return;
  }
}

}  // namespace

template <typename T>
void broadcast_bias(T* out, const T* bias, int64_t N, int64_t OC, cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(ceil_div(OC, kBroadcastThreads), 1024)),
                  static_cast<unsigned>(std::min<int64_t>(N, kMaxGridY)));
  ZERO_LAUNCH(grid, kBroadcastThreads, 0, stream, broadcast_bias_kernel<T>)(out, bias, N, OC);
  CUDA_CHECK_LAUNCH();
}

template <typename T>
void gelu_epilogue(T* out, const T* pre, int64_t n, cudaStream_t stream) {
  launch_elementwise<kVec16<T>>(n, GeluOp<T>{out, pre}, stream, out, pre);
}

BiasGradPlan bias_grad_plan(int64_t N, int64_t OC, size_t scratch_capacity_bytes) {
  BiasGradPlan plan;
  plan.rows_per_chunk = std::max<int64_t>(N, 0);
  if (N <= 0 || OC <= 0) return plan;
  int64_t chunks = ceil_div(kBiasGradTargetBlocks, ceil_div(OC, kBiasGradCols));
  chunks = std::min(chunks, N / kBiasGradMinRowsPerChunk);
  chunks = std::min(chunks, static_cast<int64_t>(scratch_capacity_bytes /
                                                 (static_cast<size_t>(OC) * sizeof(float))));
  chunks = std::min(chunks, kMaxGridY);
  if (chunks <= 1) return plan;
  // Equal chunks, then drop the ones the rounding left empty.
  const int64_t rows_per_chunk = ceil_div(N, chunks);
  chunks = ceil_div(N, rows_per_chunk);
  if (chunks <= 1) return plan;
  plan.chunks = chunks;
  plan.rows_per_chunk = rows_per_chunk;
  plan.scratch_bytes = static_cast<size_t>(chunks) * static_cast<size_t>(OC) * sizeof(float);
  return plan;
}

template <typename T>
void bias_grad(float* dbias, const T* dout, int64_t N, int64_t OC, void* scratch,
               size_t scratch_capacity_bytes, cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return;
  const BiasGradPlan plan = bias_grad_plan(N, OC, scratch_capacity_bytes);
  ZERO_CHECK(plan.chunks == 1 || scratch != nullptr, "bias_grad: scratch is null but ",
             scratch_capacity_bytes, " bytes were promised");
  auto* partials = static_cast<float*>(scratch);
  const dim3 grid(static_cast<unsigned>(ceil_div(OC, kBiasGradCols)),
                  static_cast<unsigned>(plan.chunks));
  const dim3 block(kBiasGradCols, kBiasGradRowThreads);
  ZERO_LAUNCH(grid, block, 0, stream, bias_grad_chunk_kernel<T>)
  (dbias, partials, dout, N, OC, plan.rows_per_chunk);
  CUDA_CHECK_LAUNCH();
  if (plan.chunks > 1) {
    const auto blocks = static_cast<unsigned>(
        std::min<int64_t>(ceil_div(OC, kBiasGradFinishThreads), int64_t{1} << 16));
    ZERO_LAUNCH(blocks, kBiasGradFinishThreads, 0, stream, bias_grad_finish_kernel)
    (dbias, partials, OC, plan.chunks);
    CUDA_CHECK_LAUNCH();
  }
}

#define ZERO_INSTANTIATE_EPILOGUES(T)                                            \
  template void broadcast_bias<T>(T*, const T*, int64_t, int64_t, cudaStream_t); \
  template void gelu_epilogue<T>(T*, const T*, int64_t, cudaStream_t);           \
  template void bias_grad<T>(float*, const T*, int64_t, int64_t, void*, size_t, cudaStream_t);
ZERO_INSTANTIATE_EPILOGUES(float)
ZERO_INSTANTIATE_EPILOGUES(__nv_bfloat16)
ZERO_INSTANTIATE_EPILOGUES(__half)
#undef ZERO_INSTANTIATE_EPILOGUES

void reference_gemm(const GemmArgs& args, cudaStream_t stream) {
  const ColumnMajorGemm& g = args.shape;
  ZERO_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0, "reference_gemm: negative shape");
  if (g.m == 0 || g.n == 0) return;
  switch (args.ab_dtype) {
    case DType::kF32: reference_gemm_for<float>(args, stream); return;
    case DType::kBF16: reference_gemm_for<__nv_bfloat16>(args, stream); return;
    case DType::kF16: reference_gemm_for<__half>(args, stream); return;
  }
}

}  // namespace zero::kernels::cuda
