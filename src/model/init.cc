// Counter-based initialisation (splitmix64 hashing + Box-Muller), independent of sharding and
// threads.
#include "model/init.h"

#include <algorithm>
#include <cmath>

namespace zero::model {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a, then mixed
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return splitmix64(h);
}

// Uniform in (0, 1], from the top 53 bits.
double to_unit(uint64_t bits) { return (static_cast<double>(bits >> 11) + 1.0) * 0x1.0p-53; }

// Standard normal for element i of the stream `key` (Box-Muller, one value per pair of draws).
double normal_at(uint64_t key, int64_t i) {
  uint64_t base = splitmix64(key ^ splitmix64(static_cast<uint64_t>(i)));
  double u1 = to_unit(splitmix64(base));
  double u2 = to_unit(splitmix64(base + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

}  // namespace

void init_unit_range(const ModelLayout& layout, int u, uint64_t seed, int64_t begin, int64_t end,
                     float* dst) {
  const UnitSpec& unit = layout.unit(u);
  const ModelConfig& c = layout.config();
  std::fill(dst, dst + (end - begin), 0.0f);
  for (const ParamSpec& p : unit.params) {
    int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel());
    if (lo >= hi) continue;
    float* out = dst + (lo - begin);
    switch (p.kind) {
      case ParamKind::kAttnNormWeight:
      case ParamKind::kMlpNormWeight:
      case ParamKind::kFinalNormWeight:
      case ParamKind::kQNormWeight:
      case ParamKind::kKNormWeight:
      case ParamKind::kPostAttnNormWeight:
      case ParamKind::kPostMlpNormWeight:
        // Gemma stores w of (1 + w): its identity is 0.
        std::fill(out, out + (hi - lo), static_cast<float>(1.0 - c.norm_weight_offset));
        continue;
      default: break;
    }
    if (!decays(p.kind)) continue;  // biases stay 0
    double std_dev = c.initializer_range;
    if (is_residual_projection(p.kind))
      std_dev /= std::sqrt(2.0 * static_cast<double>(c.num_layers));
    const uint64_t key = splitmix64(seed) ^ hash_name(p.name);
#pragma omp parallel for schedule(static)
    for (int64_t i = lo; i < hi; ++i) {
      out[i - lo] = static_cast<float>(std_dev * normal_at(key, i - p.offset));
    }
  }
}

}  // namespace zero::model
