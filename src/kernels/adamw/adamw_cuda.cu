// CUDA Adam / AdamW: one fused elementwise pass over a shard (grid-stride, float4 when aligned;
// a bf16 state (AdamShard's *_bf16) element by element, widened on load, rounded on store),
// with every fp32 operation an explicitly rounded intrinsic (__fmul_rn, __fadd_rn, __fsqrt_rn,
// __fdiv_rn), which nvcc never contracts into fma: the arithmetic is the CPU loop's, bit for bit.

#include "kernels/adamw/adamw_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/launch.h"
#include "core/dtype.h"

namespace zero::kernels::cuda {
namespace {

// Which 16-bit copy of the updated params the kernel writes.
enum class Copy16 { kNone, kBF16, kF16 };

// float -> bf16 bits, core/dtype.h's float_to_bf16 (round to nearest even; NaN keeps sign and
// payload with the quiet bit set).
__device__ __forceinline__ uint16_t bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// float -> f16 bits, core/dtype.cc's float_to_f16 (round to nearest even; overflow to inf; NaN to
// the canonical quiet NaN with the sign kept).
__device__ __forceinline__ uint16_t f16_bits(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal half (or zero)
    // value * 2^24 is exact; rounding it to an integer (nearest even) gives the mantissa.
    const float mantissa = rintf(__fmul_rn(__uint_as_float(magnitude), 16777216.0f));
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(mantissa));
  }
  magnitude += 0xfffu + ((magnitude >> 13) & 1u);  // round the 13 dropped bits to nearest even
  return static_cast<uint16_t>(sign | ((magnitude >> 13) - (112u << 10)));
}

template <Copy16 kCopy>
__device__ __forceinline__ uint16_t to_16bit(float p) {
  if constexpr (kCopy == Copy16::kBF16) {
    return bf16_bits(p);
  } else {
    return f16_bits(p);
  }
}

// The CPU loop's body (adamw_cpu.cc), operation for operation.
template <bool kL2, bool kDecoupled>
__device__ __forceinline__ void adam_element(const AdamConstants& a, float& p, float grad, float& m,
                                             float& v) {
  float g = __fmul_rn(grad, a.grad_scale);
  float pi = p;
  if constexpr (kL2) g = __fadd_rn(g, __fmul_rn(a.l2_decay, pi));
  const float mi = __fadd_rn(__fmul_rn(a.beta1, m), __fmul_rn(a.one_minus_beta1, g));
  const float vi = __fadd_rn(__fmul_rn(a.beta2, v), __fmul_rn(a.one_minus_beta2, __fmul_rn(g, g)));
  const float denom = __fadd_rn(__fmul_rn(__fsqrt_rn(vi), a.inv_sqrt_bc2), a.eps);
  if constexpr (kDecoupled) pi = __fadd_rn(pi, __fmul_rn(a.decoupled_decay, pi));
  p = __fadd_rn(pi, __fmul_rn(a.step_size, __fdiv_rn(mi, denom)));
  m = mi;
  v = vi;
}

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 16;

// Elements [0, numel - numel % kPack) in packs of kPack (kPack = 4: float4 accesses), then the
// remaining numel % kPack one per thread. Every element is handled by exactly one thread.
// REQUIRES (kPack == 4): param, grad, exp_avg, exp_avg_sq 16-byte aligned, param_16bit 8-byte.
template <bool kL2, bool kDecoupled, Copy16 kCopy, int kPack>
__global__ void __launch_bounds__(kThreads)
    adam_kernel(AdamConstants a, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                uint16_t* param_16bit, int64_t numel) {
  static_assert(kPack == 1 || kPack == 4);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t num_packs = numel / kPack;
  for (int64_t q = first; q < num_packs; q += stride) {
    const int64_t i = q * kPack;
    if constexpr (kPack == 4) {
      float4 p = *reinterpret_cast<const float4*>(param + i);
      const float4 g = *reinterpret_cast<const float4*>(grad + i);
      float4 m = *reinterpret_cast<const float4*>(exp_avg + i);
      float4 v = *reinterpret_cast<const float4*>(exp_avg_sq + i);
      adam_element<kL2, kDecoupled>(a, p.x, g.x, m.x, v.x);
      adam_element<kL2, kDecoupled>(a, p.y, g.y, m.y, v.y);
      adam_element<kL2, kDecoupled>(a, p.z, g.z, m.z, v.z);
      adam_element<kL2, kDecoupled>(a, p.w, g.w, m.w, v.w);
      *reinterpret_cast<float4*>(param + i) = p;
      *reinterpret_cast<float4*>(exp_avg + i) = m;
      *reinterpret_cast<float4*>(exp_avg_sq + i) = v;
      if constexpr (kCopy != Copy16::kNone) {
        const uint2 bits = {to_16bit<kCopy>(p.x) | (uint32_t{to_16bit<kCopy>(p.y)} << 16),
                            to_16bit<kCopy>(p.z) | (uint32_t{to_16bit<kCopy>(p.w)} << 16)};
        *reinterpret_cast<uint2*>(param_16bit + i) = bits;  // little-endian: p.x lowest
      }
    } else {
      float p = param[i], m = exp_avg[i], v = exp_avg_sq[i];
      adam_element<kL2, kDecoupled>(a, p, grad[i], m, v);
      param[i] = p;
      exp_avg[i] = m;
      exp_avg_sq[i] = v;
      if constexpr (kCopy != Copy16::kNone) param_16bit[i] = to_16bit<kCopy>(p);
    }
  }
  if constexpr (kPack > 1) {
    const int64_t i = num_packs * kPack + first;  // fewer than kPack elements remain
    if (i < numel) {
      float p = param[i], m = exp_avg[i], v = exp_avg_sq[i];
      adam_element<kL2, kDecoupled>(a, p, grad[i], m, v);
      param[i] = p;
      exp_avg[i] = m;
      exp_avg_sq[i] = v;
      if constexpr (kCopy != Copy16::kNone) param_16bit[i] = to_16bit<kCopy>(p);
    }
  }
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

template <bool kL2, bool kDecoupled, Copy16 kCopy>
void launch(const AdamConstants& a, const AdamShard& shard, cudaStream_t stream) {
  auto* param_16bit = static_cast<uint16_t*>(shard.param_16bit);
  const bool vector = aligned(shard.param, 16) && aligned(shard.grad, 16) &&
                      aligned(shard.exp_avg, 16) && aligned(shard.exp_avg_sq, 16) &&
                      aligned(param_16bit, 8);
  const int64_t work_items = std::max<int64_t>(vector ? shard.numel / 4 : shard.numel, 1);
  const auto blocks = static_cast<unsigned>(
      std::min<int64_t>((work_items + kThreads - 1) / kThreads, kMaxBlocks));  // >= 1: the tail
  if (vector) {
    ZERO_LAUNCH(blocks, kThreads, 0, stream, adam_kernel<kL2, kDecoupled, kCopy, 4>)
    (a, shard.param, shard.grad, shard.exp_avg, shard.exp_avg_sq, param_16bit, shard.numel);
  } else {
    ZERO_LAUNCH(blocks, kThreads, 0, stream, adam_kernel<kL2, kDecoupled, kCopy, 1>)
    (a, shard.param, shard.grad, shard.exp_avg, shard.exp_avg_sq, param_16bit, shard.numel);
  }
  CUDA_CHECK_LAUNCH();
}

template <bool kL2, bool kDecoupled>
void launch_with_copy(const AdamConstants& a, const AdamShard& shard, cudaStream_t stream) {
  if (shard.param_16bit == nullptr) {
    launch<kL2, kDecoupled, Copy16::kNone>(a, shard, stream);
  } else if (shard.param_16bit_dtype == DType::kBF16) {
    launch<kL2, kDecoupled, Copy16::kBF16>(a, shard, stream);
  } else {
    launch<kL2, kDecoupled, Copy16::kF16>(a, shard, stream);
  }
}

// A bf16 state (AdamShard's *_bf16): bf16 values widen exactly, stores round as bf16_bits.
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(uint16_t x) {
  return __uint_as_float(static_cast<uint32_t>(x) << 16);
}
__device__ __forceinline__ void narrow(float x, float* dst) { *dst = x; }
__device__ __forceinline__ void narrow(float x, uint16_t* dst) { *dst = bf16_bits(x); }

// The bf16-state update, one element per thread (grid-stride): P the master weights' storage
// (uint16_t: bf16 bits), M the moments' (float or bf16 bits). The 16-bit copy of a bf16 master is
// the master's bits.
template <bool kL2, bool kDecoupled, bool kCopy, class M>
__global__ void __launch_bounds__(kThreads)
    adam_bf16_state_kernel(AdamConstants a, uint16_t* param, const float* grad, M* exp_avg,
                           M* exp_avg_sq, uint16_t* param_16bit, int64_t numel) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = first; i < numel; i += stride) {
    float p = widen(param[i]), m = widen(exp_avg[i]), v = widen(exp_avg_sq[i]);
    adam_element<kL2, kDecoupled>(a, p, grad[i], m, v);
    narrow(p, param + i);
    narrow(m, exp_avg + i);
    narrow(v, exp_avg_sq + i);
    if constexpr (kCopy) param_16bit[i] = param[i];
  }
}

template <bool kL2, bool kDecoupled, class M>
void launch_bf16_state(const AdamConstants& a, const AdamShard& shard, M* exp_avg, M* exp_avg_sq,
                       cudaStream_t stream) {
  auto* param = reinterpret_cast<uint16_t*>(shard.param_bf16);
  auto* param_16bit = static_cast<uint16_t*>(shard.param_16bit);
  const auto blocks =
      static_cast<unsigned>(std::min<int64_t>((shard.numel + kThreads - 1) / kThreads, kMaxBlocks));
  if (param_16bit != nullptr) {
    ZERO_LAUNCH(blocks, kThreads, 0, stream, adam_bf16_state_kernel<kL2, kDecoupled, true, M>)
    (a, param, shard.grad, exp_avg, exp_avg_sq, param_16bit, shard.numel);
  } else {
    ZERO_LAUNCH(blocks, kThreads, 0, stream, adam_bf16_state_kernel<kL2, kDecoupled, false, M>)
    (a, param, shard.grad, exp_avg, exp_avg_sq, param_16bit, shard.numel);
  }
  CUDA_CHECK_LAUNCH();
}

template <bool kL2, bool kDecoupled>
void launch_by_state(const AdamConstants& a, const AdamShard& shard, cudaStream_t stream) {
  if (shard.bf16_moments()) {
    launch_bf16_state<kL2, kDecoupled>(a, shard, reinterpret_cast<uint16_t*>(shard.exp_avg_bf16),
                                       reinterpret_cast<uint16_t*>(shard.exp_avg_sq_bf16), stream);
  } else if (shard.bf16_master()) {
    launch_bf16_state<kL2, kDecoupled>(a, shard, shard.exp_avg, shard.exp_avg_sq, stream);
  } else {
    launch_with_copy<kL2, kDecoupled>(a, shard, stream);
  }
}

}  // namespace

void adam_update(const AdamArgs& args, const AdamShard& shard, float grad_scale,
                 cudaStream_t stream) {
  check_adam_call(args, shard, "adam_update (cuda)");
  if (shard.numel == 0) return;
  // The same fp32 constants as the CPU versions; a decay term is compiled out when its factor is 0.
  const AdamConstants a = adam_constants(args, grad_scale);
  if (a.l2) {
    launch_by_state<true, false>(a, shard, stream);
  } else if (a.decoupled) {
    launch_by_state<false, true>(a, shard, stream);
  } else {
    launch_by_state<false, false>(a, shard, stream);
  }
}

}  // namespace zero::kernels::cuda
