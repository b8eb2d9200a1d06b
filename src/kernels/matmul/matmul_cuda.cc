// The dense layer on the GPU, host side: MatmulContext (cuBLASLt handle, workspace, plan cache),
// the row-major -> column-major GEMM mapping, and the launchers that combine cuBLASLt GEMMs with
// the kernels of matmul_epilogue_cuda.cu. Legend: N = rows (B*T), C = in_features,
// OC = out_features. On the CPU emulator (ZERO_CUDA_EMU, docs/emu.md) the cuBLASLt calls are
// compiled out: every GEMM is reference_gemm, as on a GPU whose cuBLASLt has no algorithm.
#include "kernels/matmul/matmul_cuda.h"

#if !defined(ZERO_CUDA_EMU)
#include <cublasLt.h>
#endif
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <compare>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/matmul/matmul_epilogue_cuda.h"

namespace zero::kernels::cuda {
namespace {

#if !defined(ZERO_CUDA_EMU)
cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
  }
  return CUDA_R_32F;
}
#endif  // !ZERO_CUDA_EMU

template <typename T>
constexpr DType storage_dtype() {
  if constexpr (std::is_same_v<T, float>) return DType::kF32;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return DType::kBF16;
  if constexpr (std::is_same_v<T, __half>) return DType::kF16;
}

// The largest power of two (at most 256, cuBLASLt's default assumption) dividing the address.
uint32_t alignment_bytes(const void* p) {
  if (p == nullptr) return 256;
  const auto address = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lowest_bit = address & (~address + 1);
  return lowest_bit >= 256 ? 256u : static_cast<uint32_t>(lowest_bit);
}

#if !defined(ZERO_CUDA_EMU)
// Everything the choice of algorithm depends on. cuBLASLt's heuristic assumes the pointers it is
// shown are as aligned as the ones later passed to cublasLtMatmul, so alignments are part of it.
struct PlanKey {
  bool transpose_a, transpose_b;
  int64_t m, n, k, lda, ldb, ldd;
  DType ab_dtype, d_dtype;
  bool bias;
  uint32_t align_a, align_b, align_d, align_bias;
  auto operator<=>(const PlanKey&) const = default;
};

PlanKey plan_key(const GemmArgs& args) {
  const ColumnMajorGemm& g = args.shape;
  return {g.transpose_a,
          g.transpose_b,
          g.m,
          g.n,
          g.k,
          g.lda,
          g.ldb,
          g.ldd,
          args.ab_dtype,
          args.d_dtype,
          args.bias != nullptr,
          alignment_bytes(args.a),
          alignment_bytes(args.b),
          alignment_bytes(args.d),
          alignment_bytes(args.bias)};
}

std::string describe(const GemmArgs& args) {
  const ColumnMajorGemm& g = args.shape;
  return fmt::format(
      "column-major GEMM m={} n={} k={} op(A)={} op(B)={} lda={} ldb={} ldd={} A/B {} D {} "
      "bias {} alignments A {} B {} D {} bias {}",
      g.m, g.n, g.k, g.transpose_a ? "T" : "N", g.transpose_b ? "T" : "N", g.lda, g.ldb, g.ldd,
      dtype_name(args.ab_dtype), dtype_name(args.d_dtype), args.bias != nullptr ? "yes" : "no",
      alignment_bytes(args.a), alignment_bytes(args.b), alignment_bytes(args.d),
      alignment_bytes(args.bias));
}

// Descriptors and algorithm of one cached GEMM configuration (RAII over the cuBLASLt objects).
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a_layout = nullptr, b_layout = nullptr, d_layout = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool available = false;  // false: cuBLASLt has no algorithm for it

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (d_layout != nullptr) cublasLtMatrixLayoutDestroy(d_layout);
    if (b_layout != nullptr) cublasLtMatrixLayoutDestroy(b_layout);
    if (a_layout != nullptr) cublasLtMatrixLayoutDestroy(a_layout);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

template <typename V>
void set_desc_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                        const V& value) {
  CUBLAS_ABORT_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

template <typename V>
void set_preference(cublasLtMatmulPreference_t preference,
                    cublasLtMatmulPreferenceAttributes_t attribute, const V& value) {
  CUBLAS_ABORT_IF_ERROR(
      cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)));
}

// Builds the descriptors and asks the heuristic for its best algorithm (host work only).
std::unique_ptr<Plan> make_plan(cublasLtHandle_t handle, const GemmArgs& args) {
  const ColumnMajorGemm& g = args.shape;
  auto plan = std::make_unique<Plan>();
  CUBLAS_ABORT_IF_ERROR(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const int32_t op_a = g.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t op_b = g.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, op_a);
  set_desc_attribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, op_b);
  if (args.bias != nullptr) {
    // Bias type defaults to D's type, which is what GemmArgs promises.
    const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    set_desc_attribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
    set_desc_attribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, args.bias);
  }
  const cudaDataType_t ab_type = cuda_data_type(args.ab_dtype);
  const auto rows = [](bool transposed, int64_t outer, int64_t inner) {
    return static_cast<uint64_t>(transposed ? inner : outer);
  };
  const auto cols = [](bool transposed, int64_t outer, int64_t inner) {
    return static_cast<uint64_t>(transposed ? outer : inner);
  };
  // A is op(A)(m, k) stored as (k, m) when transposed; B is op(B)(k, n) stored (n, k) when so.
  CUBLAS_ABORT_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->a_layout, ab_type,
                                                   rows(g.transpose_a, g.m, g.k),
                                                   cols(g.transpose_a, g.m, g.k), g.lda));
  CUBLAS_ABORT_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->b_layout, ab_type,
                                                   rows(g.transpose_b, g.k, g.n),
                                                   cols(g.transpose_b, g.k, g.n), g.ldb));
  CUBLAS_ABORT_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->d_layout, cuda_data_type(args.d_dtype),
                                                   static_cast<uint64_t>(g.m),
                                                   static_cast<uint64_t>(g.n), g.ldd));

  cublasLtMatmulPreference_t preference = nullptr;
  CUBLAS_ABORT_IF_ERROR(cublasLtMatmulPreferenceCreate(&preference));
  const uint64_t workspace_bytes = MatmulContext::kWorkspaceBytes;
  set_preference(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes);
  set_preference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_bytes(args.a));
  set_preference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_bytes(args.b));
  set_preference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_bytes(args.d));
  set_preference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_bytes(args.d));
  cublasLtMatmulHeuristicResult_t result{};
  int num_results = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle, plan->desc, plan->a_layout, plan->b_layout, plan->d_layout, plan->d_layout,
      preference, 1, &result, &num_results);
  cublasLtMatmulPreferenceDestroy(preference);
  // NOT_SUPPORTED (or zero results) is the heuristic's "no algorithm"; anything else wrong with
  // the descriptors would be our bug, but it too ends in the caller's fallback or its ZERO_CHECK.
  plan->available =
      status == CUBLAS_STATUS_SUCCESS && num_results > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan->available) plan->algo = result.algo;
  return plan;
}
#endif  // !ZERO_CUDA_EMU

}  // namespace

ColumnMajorGemm matmul_forward_gemm(int64_t N, int64_t C, int64_t OC) {
  return {.transpose_a = true,
          .transpose_b = false,
          .m = OC,
          .n = N,
          .k = C,
          .lda = C,
          .ldb = C,
          .ldd = OC};
}

ColumnMajorGemm matmul_dinp_gemm(int64_t N, int64_t C, int64_t OC) {
  return {.transpose_a = false,
          .transpose_b = false,
          .m = C,
          .n = N,
          .k = OC,
          .lda = C,
          .ldb = OC,
          .ldd = C};
}

ColumnMajorGemm matmul_dweight_gemm(int64_t N, int64_t C, int64_t OC) {
  return {.transpose_a = false,
          .transpose_b = true,
          .m = C,
          .n = OC,
          .k = N,
          .lda = C,
          .ldb = OC,
          .ldd = C};
}

struct MatmulContext::Impl {
#if !defined(ZERO_CUDA_EMU)
  cublasLtHandle_t handle = nullptr;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
#endif
  void* workspace = nullptr;
  bool reference_only = false;
  bool warned_fallback = false;

  ~Impl() {
#if !defined(ZERO_CUDA_EMU)
    plans.clear();  // descriptors before the handle
#endif
    // Why the device-wide sync implied by cudaFree is acceptable: teardown, never steady state;
    // it also guarantees no GEMM still uses the workspace.
    if (workspace != nullptr) cudaFree(workspace);
#if !defined(ZERO_CUDA_EMU)
    if (handle != nullptr) cublasLtDestroy(handle);
#endif
  }
};

MatmulContext::MatmulContext(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MatmulContext::~MatmulContext() = default;

StatusOr<std::unique_ptr<MatmulContext>> MatmulContext::create() {
  auto impl = std::make_unique<Impl>();
#if !defined(ZERO_CUDA_EMU)
  const cublasStatus_t status = cublasLtCreate(&impl->handle);
  if (status != CUBLAS_STATUS_SUCCESS) {
    impl->handle = nullptr;
    return internal_error("cublasLtCreate failed: {} ({}); is a GPU usable?",
                          cublasGetStatusString(status), static_cast<int>(status));
  }
#endif
  const cudaError_t err = cudaMalloc(&impl->workspace, kWorkspaceBytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error so later calls start clean
    impl->workspace = nullptr;
    return resource_exhausted("cudaMalloc of the {}-byte cuBLASLt workspace failed: {}",
                              kWorkspaceBytes, cudaGetErrorString(err));
  }
  // A sanitizer aid (tools/gpu/verify.sh): every GEMM through reference_gemm, whose writes
  // compute-sanitizer's initcheck sees, unlike some cuBLASLt kernels' (its Hopper kernels' bulk
  // tensor stores, by the evidence of bench/results/gpu_verify_stop23.md).
  const char* reference = std::getenv("ZERO_CUDA_REFERENCE_GEMM");
  impl->reference_only = reference != nullptr && std::string_view(reference) == "1";
  return std::unique_ptr<MatmulContext>(new MatmulContext(std::move(impl)));
}

bool MatmulContext::try_gemm(const GemmArgs& args, cudaStream_t stream) {
  if (impl_->reference_only) return false;
#if defined(ZERO_CUDA_EMU)
  (void)args;
  (void)stream;
  return false;  // no cuBLASLt on the emulator: the caller takes reference_gemm
#else
  const PlanKey key = plan_key(args);
  auto it = impl_->plans.find(key);
  if (it == impl_->plans.end()) {
    it = impl_->plans.emplace(key, make_plan(impl_->handle, args)).first;
  }
  Plan& plan = *it->second;
  if (!plan.available) return false;
  if (args.bias != nullptr) {
    set_desc_attribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, args.bias);
  }
  // C is D: with beta == 0 cuBLASLt does not read it, with beta == 1 the GEMM accumulates in place.
  CUBLAS_ABORT_IF_ERROR(cublasLtMatmul(impl_->handle, plan.desc, &args.alpha, args.a, plan.a_layout,
                                       args.b, plan.b_layout, &args.beta, args.d, plan.d_layout,
                                       args.d, plan.d_layout, &plan.algo, impl_->workspace,
                                       kWorkspaceBytes, stream));
  return true;
#endif
}

void MatmulContext::gemm(const GemmArgs& args, cudaStream_t stream) {
  if (try_gemm(args, stream)) return;
#if !defined(ZERO_CUDA_EMU)  // the emulator's every GEMM is the fallback: nothing to warn about
  if (!impl_->reference_only && !impl_->warned_fallback) {
    impl_->warned_fallback = true;
    std::fprintf(stderr,
                 "zero: cuBLASLt has no algorithm for %s; using the reference GEMM kernel (slow) "
                 "for it and any other such GEMM\n",
                 describe(args).c_str());
  }
#endif
  reference_gemm(args, stream);
}

void MatmulContext::set_reference_only(bool on) { impl_->reference_only = on; }

void* MatmulContext::workspace() const { return impl_->workspace; }

size_t MatmulContext::num_plans() const {
#if defined(ZERO_CUDA_EMU)
  return 0;
#else
  return impl_->plans.size();
#endif
}

namespace {

// Runs the GEMM of `args` (D = args.d, its columns out's N rows of OC; args.bias unset) plus
// bias(OC) on every row, or none when bias is null. The BIAS epilogue only for a 16-byte aligned
// bias: there is no alignment preference for the bias vector, and misaligned ones have been
// reported to fault inside cuBLASLt. Else (or with no cuBLASLt plan) no BIAS epilogue: out is
// seeded with the bias and the product accumulated onto it (beta 1), as the CPU twin does. Same
// single rounding of the sum.
template <typename T>
void gemm_plus_bias(MatmulContext& ctx, GemmArgs args, T* out, const T* bias, int64_t N, int64_t OC,
                    cudaStream_t stream) {
  if (bias != nullptr) {
    if (alignment_bytes(bias) >= 16) {
      args.bias = bias;
      if (ctx.try_gemm(args, stream)) return;
    }
    broadcast_bias(out, bias, N, OC, stream);
    args.bias = nullptr;
    args.beta = 1.0f;
  }
  ctx.gemm(args, stream);
}

// dinp (N, C) = 0: what an overwriting backward leaves for an empty product (OC = 0).
template <typename T>
void zero_dinp(T* dinp, int64_t N, int64_t C, cudaStream_t stream) {
  if (dinp == nullptr || N * C == 0) return;
  CUDA_ABORT_IF_ERROR(cudaMemsetAsync(dinp, 0, static_cast<size_t>(N * C) * sizeof(T), stream));
}

}  // namespace

template <typename T>
void matmul_forward(MatmulContext& ctx, T* out, const T* inp, const T* weight, const T* bias,
                    int64_t N, int64_t C, int64_t OC, cudaStream_t stream) {
  if (N == 0 || OC == 0) return;
  if (C == 0) {  // an empty product: out is the bias (or zeros)
    broadcast_bias(out, bias, N, OC, stream);
    return;
  }
  constexpr DType kDtype = storage_dtype<T>();
  GemmArgs args{.shape = matmul_forward_gemm(N, C, OC),
                .ab_dtype = kDtype,
                .d_dtype = kDtype,
                .a = weight,
                .b = inp,
                .d = out};
  gemm_plus_bias(ctx, args, out, bias, N, OC, stream);
}

template <typename T>
void matmul_bias_gelu_forward(MatmulContext& ctx, T* out, T* pre_gelu, const T* inp,
                              const T* weight, const T* bias, int64_t N, int64_t C, int64_t OC,
                              cudaStream_t stream) {
  matmul_forward(ctx, pre_gelu, inp, weight, bias, N, C, OC, stream);
  gelu_epilogue(out, pre_gelu, N * OC, stream);
}

template <typename T>
void matmul_backward(MatmulContext& ctx, T* dinp, float* dweight, float* dbias, const T* dout,
                     const T* inp, const T* weight, int64_t N, int64_t C, int64_t OC,
                     cudaStream_t stream, bool accumulate_dinp) {
  if (!accumulate_dinp && OC == 0) zero_dinp(dinp, N, C, stream);  // an empty product
  if (N == 0 || OC == 0) return;
  constexpr DType kDtype = storage_dtype<T>();
  if (C > 0 && dinp != nullptr) {
    ctx.gemm({.shape = matmul_dinp_gemm(N, C, OC),
              .ab_dtype = kDtype,
              .d_dtype = kDtype,
              .a = weight,
              .b = dout,
              .d = dinp,
              .beta = accumulate_dinp ? 1.0f : 0.0f},
             stream);
  }
  if (C > 0 && dweight != nullptr) {
    ctx.gemm({.shape = matmul_dweight_gemm(N, C, OC),
              .ab_dtype = kDtype,
              .d_dtype = DType::kF32,
              .a = inp,
              .b = dout,
              .d = dweight,
              .beta = 1.0f},
             stream);
  }
  if (dbias != nullptr) {
    // The workspace is free here: the GEMMs above are ordered before this on the same stream.
    bias_grad(dbias, dout, N, OC, ctx.workspace(), MatmulContext::kWorkspaceBytes, stream);
  }
}

template <typename T16>
void matmul_forward_16(MatmulContext& ctx, float* out, int64_t out_ld, const T16* inp,
                       int64_t inp_ld, const T16* weight, const float* bias, int64_t N, int64_t C,
                       int64_t OC, cudaStream_t stream) {
  if (N == 0 || OC == 0) return;
  ZERO_CHECK(out_ld >= OC, "matmul_forward_16: out_ld ", out_ld, " < OC ", OC);
  ZERO_CHECK(bias == nullptr || out_ld == OC, "matmul_forward_16: a padded output (out_ld ", out_ld,
             ", OC ", OC, ") takes no bias");
  if (C == 0) {
    broadcast_bias(out, bias, N, OC, stream);
    return;
  }
  ZERO_CHECK(inp_ld >= C, "matmul_forward_16: inp_ld ", inp_ld, " < C ", C);
  GemmArgs args{.shape = matmul_forward_gemm(N, C, OC),
                .ab_dtype = storage_dtype<T16>(),
                .d_dtype = DType::kF32,
                .a = weight,
                .b = inp,
                .d = out};
  args.shape.ldb = inp_ld;
  args.shape.ldd = out_ld;
  // The bias is fp32, D's type (the BIAS epilogue's bias type); a padded output takes none.
  gemm_plus_bias(ctx, args, out, bias, N, OC, stream);
}

template <typename T16>
void matmul_backward_16(MatmulContext& ctx, float* dinp, float* dweight, float* dbias,
                        const float* dout, const T16* dout16, int64_t dout_ld, const T16* inp,
                        int64_t inp_ld, const T16* weight, int64_t N, int64_t C, int64_t OC,
                        cudaStream_t stream, bool accumulate_dinp) {
  if (!accumulate_dinp && OC == 0) zero_dinp(dinp, N, C, stream);  // an empty product
  if (N == 0 || OC == 0) return;
  constexpr DType kDtype = storage_dtype<T16>();
  ZERO_CHECK(dout_ld >= OC && inp_ld >= C, "matmul_backward_16: dout_ld ", dout_ld, " < OC ", OC,
             " or inp_ld ", inp_ld, " < C ", C);
  if (C > 0 && dinp != nullptr) {
    GemmArgs args{.shape = matmul_dinp_gemm(N, C, OC),
                  .ab_dtype = kDtype,
                  .d_dtype = DType::kF32,
                  .a = weight,
                  .b = dout16,
                  .d = dinp,
                  .beta = accumulate_dinp ? 1.0f : 0.0f};
    args.shape.ldb = dout_ld;
    ctx.gemm(args, stream);
  }
  if (C > 0 && dweight != nullptr) {
    GemmArgs args{.shape = matmul_dweight_gemm(N, C, OC),
                  .ab_dtype = kDtype,
                  .d_dtype = DType::kF32,
                  .a = inp,
                  .b = dout16,
                  .d = dweight,
                  .beta = 1.0f};
    args.shape.lda = inp_ld;
    args.shape.ldb = dout_ld;
    ctx.gemm(args, stream);
  }
  if (dbias != nullptr) {
    // The workspace is free here: the GEMMs above are ordered before this on the same stream.
    bias_grad(dbias, dout, N, OC, ctx.workspace(), MatmulContext::kWorkspaceBytes, stream);
  }
}

#define ZERO_INSTANTIATE_MATMUL_16(T16)                                                       \
  template void matmul_forward_16<T16>(MatmulContext&, float*, int64_t, const T16*, int64_t,  \
                                       const T16*, const float*, int64_t, int64_t, int64_t,   \
                                       cudaStream_t);                                         \
  template void matmul_backward_16<T16>(MatmulContext&, float*, float*, float*, const float*, \
                                        const T16*, int64_t, const T16*, int64_t, const T16*, \
                                        int64_t, int64_t, int64_t, cudaStream_t, bool);
ZERO_INSTANTIATE_MATMUL_16(__nv_bfloat16)
ZERO_INSTANTIATE_MATMUL_16(__half)
#undef ZERO_INSTANTIATE_MATMUL_16

#define ZERO_INSTANTIATE_MATMUL(T)                                                                \
  template void matmul_forward<T>(MatmulContext&, T*, const T*, const T*, const T*, int64_t,      \
                                  int64_t, int64_t, cudaStream_t);                                \
  template void matmul_bias_gelu_forward<T>(MatmulContext&, T*, T*, const T*, const T*, const T*, \
                                            int64_t, int64_t, int64_t, cudaStream_t);             \
  template void matmul_backward<T>(MatmulContext&, T*, float*, float*, const T*, const T*,        \
                                   const T*, int64_t, int64_t, int64_t, cudaStream_t, bool);
ZERO_INSTANTIATE_MATMUL(float)
ZERO_INSTANTIATE_MATMUL(__nv_bfloat16)
ZERO_INSTANTIATE_MATMUL(__half)
#undef ZERO_INSTANTIATE_MATMUL

}  // namespace zero::kernels::cuda
