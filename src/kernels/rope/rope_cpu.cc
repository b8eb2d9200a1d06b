// CPU reference for rotary position embeddings (HF Llama rotate_half convention, llama3 scaling).
// Legend: B batch, T time, H heads, D head_dim, D2 = D/2 (number of rotated pairs).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/check.h"
#include "kernels/rope/rope.h"

namespace zero::kernels::cpu {

std::vector<double> rope_inv_freq(int64_t head_dim, double theta, const RopeScaling& scaling,
                                  int64_t seq_len) {
  ZERO_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope head_dim must be even, got ", head_dim);
  ZERO_CHECK(theta > 0, "rope theta must be positive, got ", theta);
  const int64_t D2 = head_dim / 2;
  const double dim = static_cast<double>(head_dim);
  const std::string& type = scaling.type;
  if (type == "dynamic") {
    // HF `_compute_dynamic_ntk_parameters`: seq_len = max(seq_len, max_position_embeddings) and
    // base *= (factor * seq_len / max_pos - (factor - 1)) ^ (dim / (dim - 2)). At or below
    // max_position_embeddings the bracket is 1: the default frequencies.
    ZERO_CHECK(scaling.max_position_embeddings > 0, "dynamic rope needs max_position_embeddings");
    const double max_pos = static_cast<double>(scaling.max_position_embeddings);
    const double len = std::max(static_cast<double>(seq_len), max_pos);
    theta *= std::pow(scaling.factor * len / max_pos - (scaling.factor - 1.0), dim / (dim - 2.0));
  }
  std::vector<double> inv_freq(static_cast<size_t>(D2));
  for (int64_t i = 0; i < D2; ++i) {
    inv_freq[i] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / dim);
  }
  if (type == "default" || type == "dynamic") return inv_freq;
  if (type == "longrope") {
    // HF `_compute_longrope_parameters` (Phi-3): each frequency divided by its own factor, the
    // long ones for a sequence longer than the original context, the short ones otherwise.
    const bool long_context = seq_len > scaling.original_max_position_embeddings;
    const std::vector<double>& ext = long_context ? scaling.long_factor : scaling.short_factor;
    ZERO_CHECK(static_cast<int64_t>(ext.size()) == D2, "longrope: ", ext.size(),
               " factors for head_dim ", head_dim);
    for (int64_t i = 0; i < D2; ++i) inv_freq[i] /= ext[static_cast<size_t>(i)];
    return inv_freq;
  }
  if (type == "linear") {
    for (auto& f : inv_freq) f /= scaling.factor;
    return inv_freq;
  }
  if (type == "yarn") {
    // HF `_compute_yarn_parameters`: dimensions that rotate more than beta_fast times over the
    // original context keep their frequency (extrapolation), those rotating fewer than beta_slow
    // times are divided by factor (interpolation), with a linear ramp between.
    const double orig = static_cast<double>(scaling.original_max_position_embeddings);
    auto correction_dim = [&](double rotations) {
      return dim * std::log(orig / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(theta));
    };
    double low = correction_dim(scaling.beta_fast);
    double high = correction_dim(scaling.beta_slow);
    if (scaling.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1.0);
    if (low == high) high += 0.001;  // HF's guard against a zero-width ramp
    for (int64_t i = 0; i < D2; ++i) {
      const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
      const double extrapolation = 1.0 - ramp;
      inv_freq[i] =
          inv_freq[i] / scaling.factor * (1.0 - extrapolation) + inv_freq[i] * extrapolation;
    }
    return inv_freq;
  }
  ZERO_CHECK(type == "llama3", "unsupported rope_scaling type ", type);
  ZERO_CHECK(scaling.factor > 0 && scaling.high_freq_factor != scaling.low_freq_factor,
             "bad llama3 rope_scaling: factor ", scaling.factor, " low_freq_factor ",
             scaling.low_freq_factor, " high_freq_factor ", scaling.high_freq_factor);
  // HF `_compute_llama3_parameters`: long wavelengths are slowed down by `factor`, short ones kept,
  // and the band in between is interpolated smoothly.
  const double orig_max_pos = static_cast<double>(scaling.original_max_position_embeddings);
  const double low_freq_wavelen = orig_max_pos / scaling.low_freq_factor;
  const double high_freq_wavelen = orig_max_pos / scaling.high_freq_factor;
  for (auto& f : inv_freq) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen > low_freq_wavelen) {
      f = f / scaling.factor;
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth = (orig_max_pos / wavelen - scaling.low_freq_factor) /
                            (scaling.high_freq_factor - scaling.low_freq_factor);
      f = (1.0 - smooth) * f / scaling.factor + smooth * f;
    }
  }
  return inv_freq;
}

template <typename T>
void rope_tables(T* cos_TD2, T* sin_TD2, const std::vector<double>& inv_freq, int64_t T_,
                 double scale) {
  const int64_t D2 = static_cast<int64_t>(inv_freq.size());
  // The angle is formed in double; HF forms t * inv_freq in float32, so at large t its tables carry
  // an angle error of about t * 6e-8 rad. Ours is the more accurate; torch fixtures need a
  // tolerance.
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T_; ++t) {
    for (int64_t i = 0; i < D2; ++i) {
      const double angle = static_cast<double>(t) * inv_freq[i];
      cos_TD2[t * D2 + i] = static_cast<T>(std::cos(angle) * scale);
      sin_TD2[t * D2 + i] = static_cast<T>(std::sin(angle) * scale);
    }
  }
}

namespace {

// Rotates each pair (x[i], x[i + D2]) by +angle (sign = 1) or -angle (sign = -1, the transpose).
// Each pair is read fully before being written, so out may alias inp.
template <typename T>
void rope_rotate(T* out, const T* inp, const T* cos_TD2, const T* sin_TD2, int64_t B, int64_t T_,
                 int64_t H, int64_t D, T sign) {
  ZERO_CHECK(D % 2 == 0, "rope head_dim must be even, got ", D);
  const int64_t D2 = D / 2;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T_; ++t) {
      const T* cos_D2 = cos_TD2 + t * D2;
      const T* sin_D2 = sin_TD2 + t * D2;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t off = ((b * T_ + t) * H + h) * D;
        const T* x_D = inp + off;
        T* y_D = out + off;
        for (int64_t i = 0; i < D2; ++i) {
          const T x1 = x_D[i];
          const T x2 = x_D[i + D2];
          const T c = cos_D2[i];
          const T s = sign * sin_D2[i];
          y_D[i] = x1 * c - x2 * s;
          y_D[i + D2] = x2 * c + x1 * s;
        }
      }
    }
  }
}

}  // namespace

template <typename T>
void rope_forward(T* out, const T* inp, const T* cos_TD2, const T* sin_TD2, int64_t B, int64_t T_,
                  int64_t H, int64_t D) {
  rope_rotate(out, inp, cos_TD2, sin_TD2, B, T_, H, D, T(1));
}

template <typename T>
void rope_backward(T* dinp, const T* dout, const T* cos_TD2, const T* sin_TD2, int64_t B,
                   int64_t T_, int64_t H, int64_t D) {
  rope_rotate(dinp, dout, cos_TD2, sin_TD2, B, T_, H, D, T(-1));
}

#define ZERO_INSTANTIATE_ROPE(T)                                                              \
  template void rope_tables<T>(T*, T*, const std::vector<double>&, int64_t, double);          \
  template void rope_forward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t,  \
                                int64_t);                                                     \
  template void rope_backward<T>(T*, const T*, const T*, const T*, int64_t, int64_t, int64_t, \
                                 int64_t);
ZERO_INSTANTIATE_ROPE(float)
ZERO_INSTANTIATE_ROPE(double)
#undef ZERO_INSTANTIATE_ROPE

}  // namespace zero::kernels::cpu
