// The initialisation scheme as segments (init_segments) and their host fill; the numbers are
// kernels/init/init_math.h's (splitmix64 hashing + Box-Muller), independent of sharding, threads
// and device.
#include "model/init.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/init/init_math.h"

namespace zero::model {

namespace {

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a, then mixed
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return kernels::init::splitmix64(h);
}

}  // namespace

std::vector<InitSegment> init_segments(const ModelLayout& layout, int u, uint64_t seed,
                                       int64_t begin, int64_t end) {
  const UnitSpec& unit = layout.unit(u);
  const ModelConfig& c = layout.config();
  std::vector<InitSegment> out;
  for (const ParamSpec& p : unit.params) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.numel());
    if (lo >= hi) continue;
    InitSegment seg;
    seg.offset = lo - begin;
    seg.count = hi - lo;
    switch (p.kind) {
      case ParamKind::kAttnNormWeight:
      case ParamKind::kMlpNormWeight:
      case ParamKind::kFinalNormWeight:
      case ParamKind::kQNormWeight:
      case ParamKind::kKNormWeight:
      case ParamKind::kPostAttnNormWeight:
      case ParamKind::kPostMlpNormWeight:
        // Gemma stores w of (1 + w): its identity is 0.
        seg.value = static_cast<float>(1.0 - c.norm_weight_offset);
        out.push_back(seg);
        continue;
      default: break;
    }
    if (!decays(p.kind)) continue;  // biases stay 0
    seg.kind = InitSegment::Kind::kNormal;
    seg.std_dev = c.initializer_range;
    if (is_residual_projection(p.kind))
      seg.std_dev /= std::sqrt(2.0 * static_cast<double>(c.num_layers));
    seg.key = kernels::init::splitmix64(seed) ^ hash_name(p.name);
    seg.first_index = lo - p.offset;
    out.push_back(seg);
  }
  return out;
}

void init_unit_range(const ModelLayout& layout, int u, uint64_t seed, int64_t begin, int64_t end,
                     float* dst) {
  std::fill(dst, dst + (end - begin), 0.0f);
  for (const InitSegment& seg : init_segments(layout, u, seed, begin, end)) {
    float* out = dst + seg.offset;
    if (seg.kind == InitSegment::Kind::kConstant) {
      std::fill(out, out + seg.count, seg.value);
      continue;
    }
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < seg.count; ++j) {
      out[j] = kernels::init::scaled_normal_at(seg.key, seg.first_index + j, seg.std_dev);
    }
  }
}

}  // namespace zero::model
