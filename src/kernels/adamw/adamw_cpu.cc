// The scalar reference Adam / AdamW update (see adamw.h for the exact per-element formula).
#include "kernels/adamw/adamw.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

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
  ZERO_CHECK((shard.param != nullptr) != (shard.param_bf16 != nullptr), who,
             ": the master weights must be in exactly one of param / param_bf16");
  ZERO_CHECK((shard.exp_avg_bf16 != nullptr) == (shard.exp_avg_sq_bf16 != nullptr) &&
                 (shard.exp_avg != nullptr) != (shard.exp_avg_bf16 != nullptr) &&
                 (shard.exp_avg != nullptr) == (shard.exp_avg_sq != nullptr),
             who, ": the moments must be in exactly one of the fp32 / bf16 pairs");
  ZERO_CHECK(!shard.bf16_moments() || shard.bf16_master(), who,
             ": bf16 moments need bf16 master weights");
  ZERO_CHECK(shard.grad != nullptr, who, ": null buffer");
  ZERO_CHECK(shard.param_16bit == nullptr || shard.param_16bit_dtype != DType::kF32,
             "param_16bit must be bf16 or f16");
  ZERO_CHECK(shard.param_16bit == nullptr || !shard.bf16_master() ||
                 shard.param_16bit_dtype == DType::kBF16,
             who, ": the 16-bit copy of bf16 master weights must be bf16");
  const int prev = (shard.prev_param != nullptr) + (shard.prev_exp_avg != nullptr) +
                   (shard.prev_exp_avg_sq != nullptr);
  ZERO_CHECK(prev == 0 || prev == 3, who, ": ", prev,
             " of the three prev_* buffers set (all three or none)");
  ZERO_CHECK(prev == 0 || !shard.bf16_master(), who, ": no prev_* copy with a bf16 state");
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

// The state arrays of a shard: fp32 or bf16 (AdamShard), widened on load, rounded on store.
inline float widen(float x) { return x; }
inline float widen(bf16 x) { return bf16_to_float(x); }
inline void narrow(float x, float* dst) { *dst = x; }
inline void narrow(float x, bf16* dst) { *dst = float_to_bf16(x); }

template <class P, class M>
struct StatePtrs {
  P* param;
  M* exp_avg;
  M* exp_avg_sq;
};

// The reference: one element at a time in DeepSpeedCPUAdam's order, each operation rounded to fp32
// (the baseline x86-64 build has no FMA to contract into; omp simd only widens the loop). P / M:
// the master weights' and the moments' storage types (float or bf16).
template <bool kL2, bool kDecoupled, bool kSave, class P, class M>
void scalar_loop(const AdamConstants& c, const AdamShard& shard, StatePtrs<P, M> st, int64_t begin,
                 int64_t end) {
  static_assert(!kSave || (std::is_same_v<P, float> && std::is_same_v<M, float>));
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
  P* __restrict__ p = st.param;
  const float* __restrict__ g_in = shard.grad;
  M* __restrict__ m = st.exp_avg;
  M* __restrict__ v = st.exp_avg_sq;
  float* __restrict__ prev_p = shard.prev_param;
  float* __restrict__ prev_m = shard.prev_exp_avg;
  float* __restrict__ prev_v = shard.prev_exp_avg_sq;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    float g = g_in[i] * grad_scale;
    float pi = widen(p[i]);
    const float m0 = widen(m[i]);
    const float v0 = widen(v[i]);
    if constexpr (kSave) {
      prev_p[i] = pi;
      prev_m[i] = m0;
      prev_v[i] = v0;
    }
    if constexpr (kL2) g = g + l2_decay * pi;
    const float mi = beta1 * m0 + one_minus_beta1 * g;
    const float vi = beta2 * v0 + one_minus_beta2 * (g * g);
    const float denom = std::sqrt(vi) * inv_sqrt_bc2 + eps;
    if constexpr (kDecoupled) pi = pi + decoupled_decay * pi;
    narrow(pi + step_size * (mi / denom), &p[i]);
    narrow(mi, &m[i]);
    narrow(vi, &v[i]);
  }
  if (shard.param_16bit == nullptr) return;
  if constexpr (std::is_same_v<P, bf16>) {
    // The copy of a bf16 master is the master itself (check_adam_call: bf16 copies only).
    std::memcpy(static_cast<bf16*>(shard.param_16bit) + begin, p + begin,
                static_cast<size_t>(end - begin) * sizeof(bf16));
  } else {
    store_16bit(p, shard.param_16bit, shard.param_16bit_dtype, begin, end);
  }
}

template <bool kSave, class P, class M>
void scalar_by_decay(const AdamConstants& c, const AdamShard& s, StatePtrs<P, M> st, int64_t begin,
                     int64_t end) {
  if (c.l2) {
    scalar_loop<true, false, kSave>(c, s, st, begin, end);
  } else if (c.decoupled) {
    scalar_loop<false, true, kSave>(c, s, st, begin, end);
  } else {
    scalar_loop<false, false, kSave>(c, s, st, begin, end);
  }
}

}  // namespace

void adam_tile_scalar(const AdamConstants& c, const AdamShard& s, int64_t begin, int64_t end) {
  if (s.bf16_moments()) {
    scalar_by_decay<false>(
        c, s, StatePtrs<bf16, bf16>{s.param_bf16, s.exp_avg_bf16, s.exp_avg_sq_bf16}, begin, end);
  } else if (s.bf16_master()) {
    scalar_by_decay<false>(c, s, StatePtrs<bf16, float>{s.param_bf16, s.exp_avg, s.exp_avg_sq},
                           begin, end);
  } else if (s.saves_prev()) {
    scalar_by_decay<true>(c, s, StatePtrs<float, float>{s.param, s.exp_avg, s.exp_avg_sq}, begin,
                          end);
  } else {
    scalar_by_decay<false>(c, s, StatePtrs<float, float>{s.param, s.exp_avg, s.exp_avg_sq}, begin,
                           end);
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
