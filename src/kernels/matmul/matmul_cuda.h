// CUDA twin of the dense layer (matmul.h): cuBLASLt GEMMs with fp32 compute (CUBLAS_COMPUTE_32F,
// so no TF32 for fp32) behind a MatmulContext that owns the handle, the workspace and a per-shape
// plan cache. Legend: N = rows (B*T), C = in_features, OC = out_features. Row-major activations
// and nn.Linear (OC, C) weights, exactly as the CPU twin. Values are stored in T (float, bf16,
// fp16); weight and bias gradients are fp32 buffers accumulated into.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "core/status.h"

namespace zero::kernels::cuda {

// One GEMM as cuBLAS sees it, column-major throughout:
//   D(m, n) = alpha * op(A)(m, k) · op(B)(k, n) + beta * D.
// A is stored (k, m) when transpose_a, else (m, k), with leading dimension lda; B is stored
// (n, k) when transpose_b, else (k, n), with ldb; D is stored (m, n) with ldd.
struct ColumnMajorGemm {
  bool transpose_a = false;
  bool transpose_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
};

// The dense layer's three products mapped onto column-major GEMMs. A row-major (R, K) array is,
// read column-major with ld = K, its transpose (K, R); so a row-major product X = P · Q is computed
// as the column-major X^T = Q^T · P^T, with every array passed as it is stored:
//   forward:  out = inp · weight^T      ->  out^T(OC, N)    = weight(OC, C) · inp^T(C, N)
//             A = weight (stored C x OC, transposed), B = inp (stored C x N), D = out (OC x N)
//   dinp:     dinp += dout · weight     ->  dinp^T(C, N)    = weight^T(C, OC) · dout^T(OC, N)
//             A = weight (stored C x OC), B = dout (stored OC x N), D = dinp (C x N)
//   dweight:  dweight += dout^T · inp   ->  dweight^T(C, OC) = inp^T(C, N) · dout(N, OC)
//             A = inp (stored C x N), B = dout (stored OC x N, transposed), D = dweight (C x OC)
ColumnMajorGemm matmul_forward_gemm(int64_t N, int64_t C, int64_t OC);
ColumnMajorGemm matmul_dinp_gemm(int64_t N, int64_t C, int64_t OC);
ColumnMajorGemm matmul_dweight_gemm(int64_t N, int64_t C, int64_t OC);

// The arguments of one MatmulContext::gemm call (fp32 compute and scale type).
struct GemmArgs {
  ColumnMajorGemm shape;
  DType ab_dtype = DType::kF32;  // A and B
  DType d_dtype = DType::kF32;   // D (also read as C: the GEMM runs in place) and bias
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
  const void* bias = nullptr;  // (m), added to every column (BIAS epilogue); null: none
  float alpha = 1.0f;
  float beta = 0.0f;  // 1 accumulates into D
};

// Owns a cuBLASLt handle, a kWorkspaceBytes device workspace (allocated once, at creation) and a
// cache of GEMM plans (descriptors + the heuristic's algorithm) keyed by shape, dtypes, epilogue
// and pointer alignments, so the steady state does no heuristic query and no allocation.
// Thread safety: none. Every call must be ordered on one stream (or streams ordered by events):
// all GEMMs share the workspace, and the dense layer's own kernels borrow it between GEMMs.
class MatmulContext {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

  // Creates the handle and the workspace on the current device. A failure (no usable device, out
  // of memory) is an error Status.
  static StatusOr<std::unique_ptr<MatmulContext>> create();
  ~MatmulContext();  // frees the workspace (cudaFree waits for work still using it)
  MatmulContext(const MatmulContext&) = delete;
  MatmulContext& operator=(const MatmulContext&) = delete;

  // Enqueues the GEMM on `stream`. Returns false, enqueueing nothing, when cuBLASLt has no
  // algorithm for this configuration (the answer is cached like the algorithm). Any other cuBLAS
  // failure aborts (a bug or a dead device).
  bool try_gemm(const GemmArgs& args, cudaStream_t stream);
  // try_gemm, and where cuBLASLt has no algorithm (or `reference_only`), reference_gemm: slow but
  // always available; the first fallback of a context logs the configuration once.
  void gemm(const GemmArgs& args, cudaStream_t stream);
  // Tests: every gemm through reference_gemm (try_gemm then always answers false).
  void set_reference_only(bool on);

  // The workspace (kWorkspaceBytes, 256-byte aligned), lent between GEMMs to the dense layer's own
  // kernels on the same stream (bias gradient partial sums).
  void* workspace() const;
  // Number of cached plans (tests: the steady state adds none).
  size_t num_plans() const;

 private:
  struct Impl;
  explicit MatmulContext(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// out(N, OC) = inp(N, C) · weight(OC, C)^T + bias(OC). bias may be null. Overwrites out (which
// must not alias inp or weight). fp32 accumulation, one rounding to T (bias added before it).
// The GEMM of `args` as a plain tiled CUDA kernel (fp32 accumulation, one rounding to D's dtype;
// bias and beta as cuBLASLt applies them): the fallback of MatmulContext::gemm, and what the CPU
// emulator runs where cuBLASLt cannot.
void reference_gemm(const GemmArgs& args, cudaStream_t stream);

template <typename T>
void matmul_forward(MatmulContext& ctx, T* out, const T* inp, const T* weight, const T* bias,
                    int64_t N, int64_t C, int64_t OC, cudaStream_t stream);

// pre_gelu(N, OC) = inp · weight^T + bias (saved for the backward pass) and out(N, OC) =
// gelu_tanh(pre_gelu), the GELU computed in fp32 from the stored (T-rounded) pre_gelu, exactly
// as matmul_forward followed by gelu_forward. bias may be null. Overwrites both; out and pre_gelu
// must be distinct and not alias inp or weight.
// (Not cuBLASLt's GELU_AUX_BIAS epilogue: its documentation does not say which GELU it computes.)
template <typename T>
void matmul_bias_gelu_forward(MatmulContext& ctx, T* out, T* pre_gelu, const T* inp,
                              const T* weight, const T* bias, int64_t N, int64_t C, int64_t OC,
                              cudaStream_t stream);

// Accumulates, like the CPU twin: dinp(N, C) += dout · weight (in T: fp32 sum of the old value
// and the product, rounded once); dweight(OC, C) += dout^T · inp and dbias(OC) += Σ_rows dout
// (fp32 buffers; the bias sum is deterministic). Any of dinp / dweight / dbias may be null.
// accumulate_dinp false: dinp is overwritten instead (beta 0: its old contents, garbage included,
// are not read), which saves the caller zeroing it.
template <typename T>
void matmul_backward(MatmulContext& ctx, T* dinp, float* dweight, float* dbias, const T* dout,
                     const T* inp, const T* weight, int64_t N, int64_t C, int64_t OC,
                     cudaStream_t stream, bool accumulate_dinp = true);

// The dense layer of a 16-bit model, autocast-style (what torch.autocast runs): the GEMM operands
// are 16-bit (T16 = __nv_bfloat16 or __half: the weight as stored, the activation / gradient as a
// rounded copy the caller made), products are accumulated in fp32 and every output, bias and
// gradient is fp32. The activation copies have a row stride of their own (`inp_ld`, `dout_ld`
// elements, >= the row's width) so that the caller can pad rows to 16 bytes, which cuBLASLt's
// tensor-core algorithms need.
//
// out(N, OC) = inp16(N, C) · weight(OC, C)^T + bias(OC); bias (fp32) may be null. Overwrites out,
// whose rows are out_ld >= OC elements apart (the padding is not written); a padded out takes no
// bias.
template <typename T16>
void matmul_forward_16(MatmulContext& ctx, float* out, int64_t out_ld, const T16* inp,
                       int64_t inp_ld, const T16* weight, const float* bias, int64_t N, int64_t C,
                       int64_t OC, cudaStream_t stream);

// Accumulates dinp(N, C) += dout16 · weight and dweight(OC, C) += dout16^T · inp16 (fp32 sums
// of 16-bit products), and dbias(OC) += Σ_rows dout over the fp32 gradient `dout` (N, OC) that
// dout16 rounds, as matmul_backward<float> sums it. Any of dinp / dweight / dbias may be null;
// inp16 is read only for dweight, dout only for dbias. accumulate_dinp: as matmul_backward.
template <typename T16>
void matmul_backward_16(MatmulContext& ctx, float* dinp, float* dweight, float* dbias,
                        const float* dout, const T16* dout16, int64_t dout_ld, const T16* inp,
                        int64_t inp_ld, const T16* weight, int64_t N, int64_t C, int64_t OC,
                        cudaStream_t stream, bool accumulate_dinp = true);

}  // namespace zero::kernels::cuda
