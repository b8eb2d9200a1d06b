// LAMB CPU update (see lamb.h for the formula and the DeepSpeed FusedLamb correspondence).
#include "optim/lamb.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace zero::optim {

namespace {

constexpr int64_t kChunkNumel = 1 << 12;  // norm partial-sum granularity (thread-count independent)

inline float lamb_denom(float v, float eps, bool eps_inside_sqrt) {
  return eps_inside_sqrt ? std::sqrt(v + eps) : std::sqrt(v) + eps;
}

void store_16bit(float value, void* dst, DType dtype, int64_t i) {
  if (dtype == DType::kBF16) {
    static_cast<bf16*>(dst)[i] = float_to_bf16(value);
  } else {
    static_cast<f16*>(dst)[i] = float_to_f16(value);
  }
}

}  // namespace

std::vector<float> lamb_update(const LambArgs& args, const AdamShard& shard,
                               std::span<const int64_t> tensor_offsets, float grad_scale) {
  ZERO_CHECK(args.step >= 1, "lamb step counter must be >= 1, got ", args.step);
  ZERO_CHECK(tensor_offsets.size() >= 1 && tensor_offsets.front() == 0 &&
                 tensor_offsets.back() == shard.numel,
             "lamb tensor_offsets must run from 0 to numel ", shard.numel);
  for (size_t i = 1; i < tensor_offsets.size(); ++i) {
    ZERO_CHECK(tensor_offsets[i] >= tensor_offsets[i - 1], "lamb tensor_offsets not sorted at ", i);
  }
  ZERO_CHECK(shard.param_16bit == nullptr || shard.param_16bit_dtype != DType::kF32,
             "param_16bit must be bf16 or f16");
  ZERO_CHECK(args.min_coeff <= args.max_coeff, "lamb min_coeff ", args.min_coeff, " > max_coeff ",
             args.max_coeff);
  const int64_t num_tensors = static_cast<int64_t>(tensor_offsets.size()) - 1;
  std::vector<float> ratios(static_cast<size_t>(num_tensors), 1.0f);
  if (shard.numel == 0) return ratios;

  float step_size = args.lr;
  if (args.bias_correction) {
    const double bc1 = 1.0 - std::pow(static_cast<double>(args.beta1), double(args.step));
    const double bc2 = 1.0 - std::pow(static_cast<double>(args.beta2), double(args.step));
    step_size = static_cast<float>(args.lr * std::sqrt(bc2) / bc1);
  }
  const float b1 = args.beta1, b2 = args.beta2, eps = args.eps, wd = args.weight_decay;
  float* p = shard.param;
  const float* grad = shard.grad;
  float* m = shard.exp_avg;
  float* v = shard.exp_avg_sq;

  for (int64_t t = 0; t < num_tensors; ++t) {
    const int64_t begin = tensor_offsets[t];
    const int64_t end = tensor_offsets[t + 1];
    if (begin == end) continue;
    const int64_t num_chunks = (end - begin + kChunkNumel - 1) / kChunkNumel;
    std::vector<double> w_sq(num_chunks), u_sq(num_chunks);

    // Pass 1: moments, and the squared norms of the old weights and of the update direction.
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < num_chunks; ++c) {
      const int64_t cb = begin + c * kChunkNumel;
      const int64_t ce = std::min(end, cb + kChunkNumel);
      double w_acc = 0.0, u_acc = 0.0;
      for (int64_t i = cb; i < ce; ++i) {
        const float g = grad[i] * grad_scale;
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * (g * g);
        const float u = m[i] / lamb_denom(v[i], eps, args.eps_inside_sqrt) + wd * p[i];
        w_acc += double(p[i]) * p[i];
        u_acc += double(u) * u;
      }
      w_sq[c] = w_acc;
      u_sq[c] = u_acc;
    }
    double w_norm_sq = 0.0, u_norm_sq = 0.0;
    for (int64_t c = 0; c < num_chunks; ++c) {
      w_norm_sq += w_sq[c];
      u_norm_sq += u_sq[c];
    }
    const float w_norm = static_cast<float>(std::sqrt(w_norm_sq));
    const float u_norm = static_cast<float>(std::sqrt(u_norm_sq));
    float ratio = 1.0f;
    if (w_norm != 0.0f && u_norm != 0.0f) {
      ratio = std::clamp(w_norm / u_norm, args.min_coeff, args.max_coeff);
    }
    ratios[t] = ratio;

    // Pass 2: recompute the update from the stored moments (as FusedLamb's last kernel does).
    const float scaled_step = step_size * ratio;
#pragma omp parallel for schedule(static)
    for (int64_t i = begin; i < end; ++i) {
      const float u = m[i] / lamb_denom(v[i], eps, args.eps_inside_sqrt) + wd * p[i];
      p[i] = p[i] - scaled_step * u;
      if (shard.param_16bit != nullptr) {
        store_16bit(p[i], shard.param_16bit, shard.param_16bit_dtype, i);
      }
    }
  }
  return ratios;
}

}  // namespace zero::optim
