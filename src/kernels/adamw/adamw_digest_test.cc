// Every CPU AdamW path (the scalar reference; the SIMD body at each width, two tilings) hashed
// against digests printed by the build from before the kernels moved into kernels/adamw/ (commit
// e045532: optim/adam.cc, offload/cpu_adam*.cc): the move changed no bit. The CUDA kernel is held
// bitwise to the reference by adamw_cuda_test / adamw_emu_test. Covers AdamW,
// Adam-L2 and no decay, with and without bias correction, fp32 only / bf16 / f16 copies, sizes
// with ragged tails (1, 7, 15, 16, 17, 31, 33, 1023, 1025, 65539) and several steps.
// ADAMW_PRINT_DIGESTS=1 prints the table instead of checking it.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/adamw/adamw.h"
#include "kernels/adamw/adamw_simd.h"

namespace zero::kernels::cpu {
namespace {

struct Case {
  bool adam_w;
  float weight_decay;
  bool bias_correction;
  int out_kind;  // 0: fp32 only, 1: + bf16 copy, 2: + f16 copy
};

// FNV-1a over raw bytes.
void hash_bytes(uint64_t* h, const void* data, size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) *h = (*h ^ b[i]) * 1099511628211ull;
}

// Deterministic inputs (no <random>: its distributions are not specified bit for bit), with NaN
// grads, denormal params and zero-update elements among them.
float value(uint32_t i, uint32_t seed) {
  uint32_t h = i * 2654435761u ^ seed * 40503u;
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return static_cast<float>(h >> 8) * (1.0f / 8388608.0f) - 1.0f;  // [-1, 1)
}

// runner(args, shard, grad_scale) performs one update; returns the digest of three steps over
// every size.
template <class Runner>
uint64_t digest(const Case& c, Runner runner) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t n : {1, 7, 15, 16, 17, 31, 33, 1023, 1025, 65539}) {
    std::vector<float> p(n), g(n), m(n), v(n);
    std::vector<uint16_t> out(n, 0xdead);
    for (int64_t i = 0; i < n; ++i) {
      const auto u = static_cast<uint32_t>(i);
      p[i] = value(u, 1);
      m[i] = 0.1f * value(u, 3);
      v[i] = 0.01f * value(u, 4) * value(u, 4);
      if (i % 97 == 5) p[i] = 1e-40f;
      if (i % 89 == 3) p[i] = 65519.f;
    }
    AdamShard shard{p.data(),
                    g.data(),
                    m.data(),
                    v.data(),
                    n,
                    c.out_kind == 0 ? nullptr : out.data(),
                    c.out_kind == 2 ? DType::kF16 : DType::kBF16};
    for (int64_t step = 1; step <= 3; ++step) {
      for (int64_t i = 0; i < n; ++i) {
        g[i] = 1024.f * value(static_cast<uint32_t>(i), 10 + static_cast<uint32_t>(step));
        if (i % 101 == 7) g[i] = std::numeric_limits<float>::quiet_NaN();
      }
      AdamArgs args;
      args.lr = 3e-3f;
      args.weight_decay = c.weight_decay;
      args.adam_w_mode = c.adam_w;
      args.bias_correction = c.bias_correction;
      args.step = step;
      runner(args, shard, 1.f / 1024.f);
    }
    hash_bytes(&h, p.data(), p.size() * 4);
    hash_bytes(&h, m.data(), m.size() * 4);
    hash_bytes(&h, v.data(), v.size() * 4);
    if (c.out_kind != 0) hash_bytes(&h, out.data(), out.size() * 2);
  }
  return h;
}

// Printed by this file compiled against e045532 (ADAMW_PRINT_DIGESTS=1), where every path agreed.
struct Golden {
  Case c;
  uint64_t digest;
};
const Golden kGolden[] = {
#include "kernels/adamw/adamw_digests.inc"
};

std::string name(const Case& c) {
  return std::string(c.adam_w ? "adamw" : "adam-l2") + " wd=" + std::to_string(c.weight_decay) +
         " bc=" + std::to_string(c.bias_correction) + " out=" + std::to_string(c.out_kind);
}

TEST(AdamWDigest, EveryPathMatchesTheDigestsFromBeforeTheMove) {
  const bool print = std::getenv("ADAMW_PRINT_DIGESTS") != nullptr;
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (cpu_isa_supported(isa)) isas.push_back(isa);
  }
  for (const Golden& golden : kGolden) {
    const Case& c = golden.c;
    const uint64_t ref =
        digest(c, [](const AdamArgs& a, const AdamShard& s, float gs) { adam_update(a, s, gs); });
    if (print) {
      std::printf("    {{%s, %.2ff, %s, %d}, 0x%016" PRIx64 "ull},\n", c.adam_w ? "true" : "false",
                  c.weight_decay, c.bias_correction ? "true" : "false", c.out_kind, ref);
    } else {
      EXPECT_EQ(ref, golden.digest) << "reference, " << name(c);
    }
    for (CpuIsa isa : isas) {
      for (int64_t tile : {int64_t{64}, int64_t{1} << 16}) {
        AdamSimdOptions opts;
        opts.isa = isa;
        opts.tile_numel = tile;
        const uint64_t got = digest(c, [&](const AdamArgs& a, const AdamShard& s, float gs) {
          adam_update_simd(a, s, gs, opts);
        });
        EXPECT_EQ(got, ref) << cpu_isa_name(isa) << " tile=" << tile << ", " << name(c);
      }
    }
  }
}

}  // namespace
}  // namespace zero::kernels::cpu
