// GPU kernel timings at GPT-2 124M training shapes (B=8, T=1024, C=768, 12 heads, vocab 50257):
// each op of one transformer step as ZeRO.cpp runs it, timed with CUDA events on one stream
// (warm-up, then the mean of `iters` back-to-back launches). bench/gpu/torch_kernels.py times
// PyTorch's equivalents on the same shapes; bench/gpu/run.sh prints the two side by side.
//
//   kernels_gpu_bench [--iters N] [--batch B]     one line per op: "op<TAB>ms<TAB>what"
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_stream.h"
#include "core/device.h"
#include "kernels/adamw/adamw_cuda.h"
#include "kernels/attention/attention_cuda.h"
#include "kernels/cross_entropy/cross_entropy_cuda.h"
#include "kernels/gelu/gelu_cuda.h"
#include "kernels/layernorm/layernorm_cuda.h"
#include "kernels/matmul/matmul_cuda.h"

namespace {

using bf16 = __nv_bfloat16;
namespace kc = zero::kernels::cuda;

// Device buffer of n elements filled with uniform values in [lo, hi) (fixed seed), freed on exit.
template <typename T>
T* device_random(size_t n, float lo, float hi, uint64_t seed) {
  std::vector<T> host(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const float u = static_cast<float>(s >> 40) / static_cast<float>(1ull << 24);
    if constexpr (std::is_same_v<T, bf16>) {
      host[i] = __float2bfloat16(lo + (hi - lo) * u);
    } else if constexpr (std::is_same_v<T, int32_t>) {
      host[i] = static_cast<int32_t>(u * hi);
    } else {
      host[i] = lo + (hi - lo) * u;
    }
  }
  T* p = nullptr;
  CUDA_ABORT_IF_ERROR(cudaMalloc(&p, n * sizeof(T)));
  CUDA_ABORT_IF_ERROR(cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

void* device_bytes(size_t n) {
  void* p = nullptr;
  CUDA_ABORT_IF_ERROR(cudaMalloc(&p, n == 0 ? 1 : n));
  CUDA_ABORT_IF_ERROR(cudaMemset(p, 0, n == 0 ? 1 : n));
  return p;
}

// Mean milliseconds of one call of `op` over `iters` launches, after 3 warm-up calls.
double time_ms(cudaStream_t stream, int iters, const std::function<void()>& op) {
  for (int i = 0; i < 3; ++i) op();
  cudaEvent_t start, stop;
  CUDA_ABORT_IF_ERROR(cudaEventCreate(&start));
  CUDA_ABORT_IF_ERROR(cudaEventCreate(&stop));
  CUDA_ABORT_IF_ERROR(cudaEventRecord(start, stream));
  for (int i = 0; i < iters; ++i) op();
  CUDA_ABORT_IF_ERROR(cudaEventRecord(stop, stream));
  CUDA_ABORT_IF_ERROR(cudaEventSynchronize(stop));
  float ms = 0;
  CUDA_ABORT_IF_ERROR(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / iters;
}

void report(const char* op, double ms, const std::string& what) {
  std::printf("%s\t%.4f\t%s\n", op, ms, what.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 20;
  int64_t B = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--batch") == 0) B = std::atoll(argv[i + 1]);
  }
  if (!zero::probe_cuda().available) {
    std::fprintf(stderr, "kernels_gpu_bench: no GPU: %s\n", zero::probe_cuda().why_not.c_str());
    return 2;
  }
  const int64_t T = 1024, C = 768, H = 12, D = 64, V = 50257, N = B * T;
  zero::cuda::CudaStream stream;
  cudaStream_t s = stream.get();
  auto ctx_or = kc::MatmulContext::create();
  if (!ctx_or.ok()) {
    std::fprintf(stderr, "kernels_gpu_bench: %s\n", ctx_or.status().to_string().c_str());
    return 1;
  }
  kc::MatmulContext& ctx = **ctx_or;

  // Activations and weights, bf16 (the mixed-precision path), one layer's worth.
  bf16* x = device_random<bf16>(N * C, -1, 1, 1);
  bf16* y = device_random<bf16>(N * C, -1, 1, 2);
  bf16* dy = device_random<bf16>(N * C, -1, 1, 3);
  bf16* ln_w = device_random<bf16>(C, 0.5, 1.5, 4);
  bf16* ln_b = device_random<bf16>(C, -0.1, 0.1, 5);
  auto* mean = static_cast<float*>(device_bytes(N * sizeof(float)));
  auto* rstd = static_cast<float*>(device_bytes(N * sizeof(float)));
  auto* dw = static_cast<float*>(device_bytes(4 * C * C * sizeof(float)));
  auto* db = static_cast<float*>(device_bytes(4 * C * sizeof(float)));
  const std::string tok = "N=" + std::to_string(N);
  // Clocks up before the first timing: ~1 s of GEMMs (PyTorch's side does the same).
  {
    bf16* w = device_random<bf16>(4 * C * C, -0.05, 0.05, 30);
    bf16* h = device_random<bf16>(N * 4 * C, -1, 1, 31);
    for (int i = 0; i < 5000; ++i) kc::matmul_forward<bf16>(ctx, h, x, w, nullptr, N, C, 4 * C, s);
    CUDA_ABORT_IF_ERROR(cudaStreamSynchronize(s));
    cudaFree(w);
    cudaFree(h);
  }

  kc::layernorm_forward<bf16>(y, mean, rstd, x, ln_w, ln_b, N, C, 1e-5f, s);
  report(
      "layernorm_fwd",
      time_ms(s, iters,
              [&] { kc::layernorm_forward<bf16>(y, mean, rstd, x, ln_w, ln_b, N, C, 1e-5f, s); }),
      tok + " C=768 bf16");
  {
    const size_t bytes = kc::layernorm_backward_scratch_bytes(N, C);
    void* scratch = device_bytes(bytes);
    report("layernorm_bwd",
           time_ms(s, iters,
                   [&] {
                     kc::layernorm_backward<bf16>(y, dw, db, dy, x, ln_w, mean, rstd, N, C, scratch,
                                                  bytes, s);
                   }),
           tok + " C=768 bf16");
    cudaFree(scratch);
  }

  // Attention: q, k, v (B, T, H, D) each, causal.
  {
    bf16* q = device_random<bf16>(N * C, -1, 1, 6);
    bf16* k = device_random<bf16>(N * C, -1, 1, 7);
    bf16* v = device_random<bf16>(N * C, -1, 1, 8);
    bf16* o = device_random<bf16>(N * C, -1, 1, 9);
    bf16* dq = device_random<bf16>(N * C, -1, 1, 10);
    bf16* dk = device_random<bf16>(N * C, -1, 1, 11);
    bf16* dv = device_random<bf16>(N * C, -1, 1, 12);
    auto* lse = static_cast<float*>(device_bytes(B * H * T * sizeof(float)));
    const double flops_fwd = 4.0 * B * H * T * T * D / 2;  // causal: half the score matrix
    double ms =
        time_ms(s, iters, [&] { kc::attention_forward<bf16>(o, lse, q, k, v, B, T, H, H, D, s); });
    report("attention_fwd", ms,
           "B=" + std::to_string(B) + " T=1024 H=12 D=64 causal bf16, " +
               std::to_string(static_cast<int>(flops_fwd / ms / 1e9)) + " TFLOP/s");
    void* scratch = device_bytes(kc::attention_backward_scratch_bytes(B, T, H, H, D));
    ms = time_ms(s, iters, [&] {
      kc::attention_backward<bf16>(dq, dk, dv, dy, o, lse, q, k, v, B, T, H, H, D, scratch, s);
    });
    report("attention_bwd", ms,
           "causal bf16, " + std::to_string(static_cast<int>(2.5 * flops_fwd / ms / 1e9)) +
               " TFLOP/s");
    for (void* p : {(void*)q, (void*)k, (void*)v, (void*)o, (void*)dq, (void*)dk, (void*)dv,
                    (void*)lse, scratch}) {
      cudaFree(p);
    }
  }

  // MLP: fc (C -> 4C) with bias + GELU fused, then the dense layers' backward.
  {
    bf16* w = device_random<bf16>(4 * C * C, -0.05, 0.05, 13);
    bf16* bias = device_random<bf16>(4 * C, -0.05, 0.05, 14);
    bf16* h = device_random<bf16>(N * 4 * C, -1, 1, 15);
    bf16* pre = device_random<bf16>(N * 4 * C, -1, 1, 16);
    bf16* dh = device_random<bf16>(N * 4 * C, -1, 1, 17);
    const double flops = 2.0 * N * C * 4 * C;
    double ms =
        time_ms(s, iters, [&] { kc::matmul_forward<bf16>(ctx, h, x, w, bias, N, C, 4 * C, s); });
    report("matmul_fwd", ms,
           "N x 768 x 3072 +bias bf16, " + std::to_string(static_cast<int>(flops / ms / 1e9)) +
               " TFLOP/s");
    ms = time_ms(s, iters, [&] {
      kc::matmul_bias_gelu_forward<bf16>(ctx, h, pre, x, w, bias, N, C, 4 * C, s);
    });
    report("matmul_gelu_fwd", ms, "the same + GELU fused (keeps pre-GELU)");
    ms = time_ms(s, iters,
                 [&] { kc::matmul_backward<bf16>(ctx, y, dw, db, dh, x, w, N, C, 4 * C, s); });
    report("matmul_bwd", ms,
           "dinp, dweight (fp32), dbias, " +
               std::to_string(static_cast<int>(2 * flops / ms / 1e9)) + " TFLOP/s");
    ms = time_ms(s, iters, [&] { kc::gelu_forward<bf16>(h, pre, N * 4 * C, s); });
    report("gelu_fwd", ms, "N*3072 bf16");
    ms = time_ms(s, iters, [&] { kc::gelu_backward<bf16>(dh, pre, h, N * 4 * C, s); });
    report("gelu_bwd", ms, "N*3072 bf16");
    for (void* p : {(void*)w, (void*)bias, (void*)h, (void*)pre, (void*)dh}) cudaFree(p);
  }

  // Loss: fused cross-entropy forward + backward in place over the bf16 logits.
  {
    bf16* logits = device_random<bf16>(N * V, -4, 4, 18);
    int32_t* targets = device_random<int32_t>(N, 0, static_cast<float>(V), 19);
    auto* losses = static_cast<float*>(device_bytes(N * sizeof(float)));
    // In place: each call overwrites the logits with their gradient, which stays a valid input.
    const double ms = time_ms(s, iters, [&] {
      kc::cross_entropy_fused<bf16>(losses, logits, targets, 1.0f / N, N, V, s);
    });
    report("cross_entropy_fused", ms, tok + " V=50257 bf16 (loss and dlogits in one pass)");
    for (void* p : {(void*)logits, (void*)targets, (void*)losses}) cudaFree(p);
  }

  // AdamW over GPT-2 124M's parameters: fp32 master, moments, grads, plus the bf16 copy.
  {
    const int64_t P = 124439808;
    float* p = device_random<float>(P, -0.05, 0.05, 20);
    float* g = device_random<float>(P, -0.01, 0.01, 21);
    auto* m = static_cast<float*>(device_bytes(P * sizeof(float)));
    auto* v2 = static_cast<float*>(device_bytes(P * sizeof(float)));
    void* p16 = device_bytes(P * sizeof(bf16));
    zero::kernels::AdamArgs args;
    args.weight_decay = 0.1f;
    zero::kernels::AdamShard shard{p, g, m, v2, P, p16, zero::DType::kBF16};
    const double ms = time_ms(s, iters, [&] { kc::adam_update(args, shard, 1.0f, s); });
    // Bytes moved: read p, g, m, v; write p, m, v, p16.
    const double gbs = (7.0 * 4 + 2) * P / ms / 1e6;
    report("adamw", ms,
           "124M params fp32 + bf16 copy, " + std::to_string(static_cast<int>(gbs)) + " GB/s");
    for (void* q : {(void*)p, (void*)g, (void*)m, (void*)v2, p16}) cudaFree(q);
  }
  for (void* q : {(void*)x, (void*)y, (void*)dy, (void*)ln_w, (void*)ln_b, (void*)mean, (void*)rstd,
                  (void*)dw, (void*)db}) {
    cudaFree(q);
  }
  return 0;
}
