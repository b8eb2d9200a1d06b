// The scalar reference Adam / AdamW update (see adamw.h for the exact per-element formula).
#include "kernels/adamw/adamw.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/adamw/adamw_tile.h"

namespace zero::kernels {

AdamScalars adam_scalars(const AdamArgs& args) {
  // Scalars in double, rounded once to float: the per-element math is fp32 like DeepSpeed's.
  double bc1 = 1.0;
  double bc2 = 1.0;
  if (args.bias_correction) {
    bc1 = 1.0 - std::pow(static_cast<double>(args.beta1), static_cast<double>(args.step));
    bc2 = 1.0 - std::pow(static_cast<double>(args.beta2), static_cast<double>(args.step));
  }
  AdamScalars s;
  s.step_size = static_cast<float>(-static_cast<double>(args.lr) / bc1);
  s.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  s.decoupled_decay = args.adam_w_mode
                          ? static_cast<float>(-static_cast<double>(args.lr) * args.weight_decay)
                          : 0.f;
  s.l2_decay = args.adam_w_mode ? 0.f : args.weight_decay;
  return s;
}

AdamConstants adam_constants(const AdamArgs& args, float grad_scale) {
  const AdamScalars s = adam_scalars(args);
  AdamConstants c;
  c.beta1 = args.beta1;
  c.beta2 = args.beta2;
  c.one_minus_beta1 = 1.0f - args.beta1;
  c.one_minus_beta2 = 1.0f - args.beta2;
  c.eps = args.eps;
  c.grad_scale = grad_scale;
  c.step_size = s.step_size;
  c.inv_sqrt_bc2 = s.inv_sqrt_bc2;
  c.decoupled_decay = s.decoupled_decay;
  c.l2_decay = s.l2_decay;
  c.l2 = s.l2_decay != 0.f;
  c.decoupled = s.decoupled_decay != 0.f;
  return c;
}

void check_adam_call(const AdamArgs& args, const AdamShard& shard, const char* who) {
  ZERO_CHECK(args.step >= 1, "adam step counter must be >= 1, got ", args.step);
  ZERO_CHECK(shard.numel >= 0, "negative numel ", shard.numel);
  if (shard.numel == 0) return;
  ZERO_CHECK(shard.param && shard.grad && shard.exp_avg && shard.exp_avg_sq, who, ": null buffer");
  ZERO_CHECK(shard.param_16bit == nullptr || shard.param_16bit_dtype != DType::kF32,
             "param_16bit must be bf16 or f16");
  const int prev = (shard.prev_param != nullptr) + (shard.prev_exp_avg != nullptr) +
                   (shard.prev_exp_avg_sq != nullptr);
  ZERO_CHECK(prev == 0 || prev == 3, who, ": ", prev,
             " of the three prev_* buffers set (all three or none)");
}

namespace cpu {
namespace detail {

namespace {

// Stores the updated fp32 params of [begin, end) as 16-bit.
void store_16bit(const float* param, void* dst, DType dtype, int64_t begin, int64_t end) {
  if (dtype == DType::kBF16) {
    auto* out = static_cast<bf16*>(dst);
    for (int64_t i = begin; i < end; ++i) out[i] = float_to_bf16(param[i]);
  } else {
    auto* out = static_cast<f16*>(dst);
    for (int64_t i = begin; i < end; ++i) out[i] = float_to_f16(param[i]);
  }
}

// The reference: one element at a time in DeepSpeedCPUAdam's order, each operation rounded to fp32
// (the baseline x86-64 build has no FMA to contract into; omp simd only widens the loop).
template <bool kL2, bool kDecoupled, bool kSave>
void scalar_loop(const AdamConstants& c, const AdamShard& shard, int64_t begin, int64_t end) {
  const float beta1 = c.beta1;
  const float beta2 = c.beta2;
  const float one_minus_beta1 = c.one_minus_beta1;
  const float one_minus_beta2 = c.one_minus_beta2;
  const float eps = c.eps;
  const float grad_scale = c.grad_scale;
  const float l2_decay = c.l2_decay;
  const float inv_sqrt_bc2 = c.inv_sqrt_bc2;
  const float decoupled_decay = c.decoupled_decay;
  const float step_size = c.step_size;
  float* __restrict__ p = shard.param;
  const float* __restrict__ g_in = shard.grad;
  float* __restrict__ m = shard.exp_avg;
  float* __restrict__ v = shard.exp_avg_sq;
  float* __restrict__ prev_p = shard.prev_param;
  float* __restrict__ prev_m = shard.prev_exp_avg;
  float* __restrict__ prev_v = shard.prev_exp_avg_sq;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    float g = g_in[i] * grad_scale;
    float pi = p[i];
    if constexpr (kSave) {
      prev_p[i] = pi;
      prev_m[i] = m[i];
      prev_v[i] = v[i];
    }
    if constexpr (kL2) g = g + l2_decay * pi;
    const float mi = beta1 * m[i] + one_minus_beta1 * g;
    const float vi = beta2 * v[i] + one_minus_beta2 * (g * g);
    const float denom = std::sqrt(vi) * inv_sqrt_bc2 + eps;
    if constexpr (kDecoupled) pi = pi + decoupled_decay * pi;
    p[i] = pi + step_size * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
  if (shard.param_16bit != nullptr) {
    store_16bit(p, shard.param_16bit, shard.param_16bit_dtype, begin, end);
  }
}

template <bool kSave>
void scalar_by_decay(const AdamConstants& c, const AdamShard& s, int64_t begin, int64_t end) {
  if (c.l2) {
    scalar_loop<true, false, kSave>(c, s, begin, end);
  } else if (c.decoupled) {
    scalar_loop<false, true, kSave>(c, s, begin, end);
  } else {
    scalar_loop<false, false, kSave>(c, s, begin, end);
  }
}

}  // namespace

void adam_tile_scalar(const AdamConstants& c, const AdamShard& s, int64_t begin, int64_t end) {
  if (s.saves_prev()) {
    scalar_by_decay<true>(c, s, begin, end);
  } else {
    scalar_by_decay<false>(c, s, begin, end);
  }
}

}  // namespace detail

void adam_update(const AdamArgs& args, const AdamShard& shard, float grad_scale) {
  check_adam_call(args, shard, "adam_update");
  if (shard.numel == 0) return;
  const AdamConstants c = adam_constants(args, grad_scale);
  // Fixed-size tiles so the 16-bit copy happens while the tile is still in cache.
  constexpr int64_t kTileNumel = 1 << 14;
  const int64_t num_tiles = (shard.numel + kTileNumel - 1) / kTileNumel;
#pragma omp parallel for schedule(static)
  for (int64_t tile = 0; tile < num_tiles; ++tile) {
    const int64_t begin = tile * kTileNumel;
    detail::adam_tile_scalar(c, shard, begin, std::min(shard.numel, begin + kTileNumel));
  }
}

}  // namespace cpu
}  // namespace zero::kernels
