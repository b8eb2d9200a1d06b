// adam_update_simd against the scalar reference adam_update: bitwise on every ISA path,
// Adam/AdamW modes, bias correction, 16-bit copies (incl. NaN, subnormal, overflow), odd sizes.
#include "kernels/adamw/adamw_simd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace zero::kernels::cpu {
namespace {

// Four fp32 state arrays plus a 16-bit copy, with one element of slack so tests can misalign.
struct State {
  std::vector<float> p, g, m, v;
  std::vector<uint16_t> out;
  int64_t n = 0;
  int64_t offset = 0;

  AdamShard shard(DType out_dtype, bool with_out) {
    AdamShard s;
    s.param = p.data() + offset;
    s.grad = g.data() + offset;
    s.exp_avg = m.data() + offset;
    s.exp_avg_sq = v.data() + offset;
    s.numel = n;
    s.param_16bit = with_out ? out.data() + offset : nullptr;
    s.param_16bit_dtype = out_dtype;
    return s;
  }
};

// Random state with special values sprinkled in: NaN grads (with payloads and both signs), and
// elements whose update is exactly zero so the stored param is a chosen 16-bit edge case.
State make_state(int64_t n, int64_t offset, uint32_t seed) {
  State st;
  st.n = n;
  st.offset = offset;
  const size_t total = static_cast<size_t>(n + offset);
  st.p.resize(total);
  st.g.resize(total);
  st.m.resize(total);
  st.v.resize(total);
  st.out.assign(total, 0xdead);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (size_t i = 0; i < total; ++i) {
    st.p[i] = normal(rng);
    st.g[i] = normal(rng) * 1024.f;  // still multiplied by a loss scale of 1024
    st.m[i] = normal(rng) * 0.1f;
    st.v[i] = std::abs(normal(rng)) * 0.01f;
  }
  const float edge[] = {1e-40f,
                        -3e-39f,
                        1e-7f,
                        -5.96e-8f,
                        3e-8f,
                        6.1e-5f,
                        65519.f,
                        65520.f,
                        -70000.f,
                        1e30f,
                        1.00390625f,
                        1.01171875f,
                        1.0009765625f * 1.0004882812f,
                        std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(),
                        0.f,
                        -0.f};
  size_t k = 0;
  for (size_t i = offset; i < total; i += 13) {
    const uint32_t r = rng();
    if (r % 3 == 0) {
      // NaN gradient with a payload and a random sign.
      st.g[i] = bits_float((r & 0x80000000u) | 0x7f800000u | ((r >> 3) & 0x3fffffu) | 1u);
    } else {
      st.g[i] = 0.f;
      st.m[i] = 0.f;
      st.v[i] = 0.f;
      st.p[i] = edge[k++ % (sizeof(edge) / sizeof(edge[0]))];
    }
  }
  return st;
}

void expect_same(const State& a, const State& b, bool with_out, const char* what) {
  const size_t o = static_cast<size_t>(a.offset);
  const size_t n = static_cast<size_t>(a.n);
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(&a.p[o + i], &b.p[o + i], 4) != 0) {
      ADD_FAILURE() << what << ": first param difference at " << i << ": " << a.p[o + i] << " vs "
                    << b.p[o + i];
      break;
    }
  }
  // memcmp with n == 0 may see null data() pointers (empty vectors): compare only real bytes.
  auto same = [](const void* x, const void* y, size_t bytes) {
    return bytes == 0 || std::memcmp(x, y, bytes) == 0;
  };
  EXPECT_TRUE(same(a.m.data() + o, b.m.data() + o, n * 4)) << what << ": exp_avg differs";
  EXPECT_TRUE(same(a.v.data() + o, b.v.data() + o, n * 4)) << what << ": exp_avg_sq differs";
  if (with_out) {
    EXPECT_TRUE(same(a.out.data() + o, b.out.data() + o, n * 2)) << what << ": 16-bit copy differs";
  }
  // Nothing outside [offset, offset + n) is touched.
  for (size_t i = 0; i < o; ++i) EXPECT_EQ(b.out[i], 0xdead);
}

std::vector<CpuIsa> supported_isas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (cpu_isa_supported(isa)) isas.push_back(isa);
  }
  return isas;
}

TEST(AdamWSimd, IsaNames) {
  for (CpuIsa isa : {CpuIsa::kAuto, CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    CpuIsa parsed = CpuIsa::kScalar;
    ASSERT_TRUE(parse_cpu_isa(cpu_isa_name(isa), &parsed));
    EXPECT_EQ(parsed, isa);
  }
  CpuIsa unused;
  EXPECT_FALSE(parse_cpu_isa("sse9", &unused));
  EXPECT_TRUE(cpu_isa_supported(best_cpu_isa()));
  if (!cpu_isa_supported(CpuIsa::kAvx512)) GTEST_LOG_(INFO) << "AVX-512 path not testable here";
  if (!cpu_isa_supported(CpuIsa::kAvx2)) GTEST_LOG_(INFO) << "AVX2 path not testable here";
}

// Every (mode, bias correction, 16-bit copy, ISA, size, alignment) against adam_update.
TEST(AdamWSimd, BitwiseEqualToScalarReference) {
  const int64_t sizes[] = {0, 1, 7, 8, 15, 16, 17, 31, 33, 100, 1000, 65537};
  struct Mode {
    bool adam_w;
    float wd;
  };
  const Mode modes[] = {{true, 0.01f}, {false, 0.01f}, {true, 0.f}};
  for (CpuIsa isa : supported_isas()) {
    for (int64_t n : sizes) {
      for (const Mode& mode : modes) {
        for (bool bias_correction : {true, false}) {
          for (int out_kind = 0; out_kind < 3; ++out_kind) {
            const bool with_out = out_kind != 0;
            const DType out_dtype = out_kind == 2 ? DType::kF16 : DType::kBF16;
            const int64_t offset = (n + out_kind) % 3;  // misaligned starts too
            AdamArgs args;
            args.lr = 3e-3f;
            args.weight_decay = mode.wd;
            args.adam_w_mode = mode.adam_w;
            args.bias_correction = bias_correction;
            args.step = 1 + n % 5;
            State ref = make_state(n, offset, static_cast<uint32_t>(n * 7 + out_kind));
            State got = ref;
            adam_update(args, ref.shard(out_dtype, with_out), 1.f / 1024.f);
            AdamSimdOptions opts;
            opts.isa = isa;
            opts.tile_numel = 64;  // many tiles even for small sizes
            adam_update_simd(args, got.shard(out_dtype, with_out), 1.f / 1024.f, opts);
            const std::string what =
                std::string(cpu_isa_name(isa)) + " n=" + std::to_string(n) +
                " adamw=" + std::to_string(mode.adam_w) + " wd=" + std::to_string(mode.wd) +
                " bc=" + std::to_string(bias_correction) + " out=" + std::to_string(out_kind);
            expect_same(ref, got, with_out, what.c_str());
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

// The 16-bit copy equals core/dtype.h's conversions of the updated fp32 params.
TEST(AdamWSimd, SixteenBitCopyMatchesDtypeConversions) {
  for (CpuIsa isa : supported_isas()) {
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      State st = make_state(1001, 0, 99);
      AdamArgs args;
      AdamSimdOptions opts;
      opts.isa = isa;
      adam_update_simd(args, st.shard(dtype, true), 1.f, opts);
      for (size_t i = 0; i < st.p.size(); ++i) {
        const uint16_t want =
            dtype == DType::kBF16 ? float_to_bf16(st.p[i]).bits : float_to_f16(st.p[i]).bits;
        ASSERT_EQ(st.out[i], want)
            << cpu_isa_name(isa) << " " << dtype_name(dtype) << " at " << i << " value " << st.p[i]
            << " bits " << std::hex << float_bits(st.p[i]);
      }
    }
  }
}

// Results do not depend on the thread count or the tiling.
TEST(AdamWSimd, ThreadAndTileIndependent) {
  const int64_t n = 1000003;
  AdamArgs args;
  args.weight_decay = 0.1f;
  args.step = 3;
  State base = make_state(n, 0, 5);
  State ref = base;
  adam_update(args, ref.shard(DType::kBF16, true), 0.5f);
  for (CpuIsa isa : supported_isas()) {
    for (int threads : {1, 2, 3}) {
      for (int64_t tile : {int64_t{1}, int64_t{1000}, int64_t{1} << 16, int64_t{1} << 22}) {
        State got = base;
        AdamSimdOptions opts;
        opts.isa = isa;
        opts.num_threads = threads;
        opts.tile_numel = tile;
        adam_update_simd(args, got.shard(DType::kBF16, true), 0.5f, opts);
        const std::string what = std::string(cpu_isa_name(isa)) +
                                 " threads=" + std::to_string(threads) +
                                 " tile=" + std::to_string(tile);
        expect_same(ref, got, true, what.c_str());
      }
    }
  }
}

// Several consecutive steps stay bitwise on the reference trajectory.
TEST(AdamWSimd, MultiStepTrajectory) {
  State ref = make_state(4099, 1, 11);
  State got = ref;
  AdamArgs args;
  args.weight_decay = 0.01f;
  for (int64_t step = 1; step <= 10; ++step) {
    args.step = step;
    adam_update(args, ref.shard(DType::kF16, true), 1.f / 1024.f);
    adam_update_simd(args, got.shard(DType::kF16, true), 1.f / 1024.f);
  }
  expect_same(ref, got, true, "10 steps");
}

// The prev_* outputs (the overlapped offload update's rollback copy) receive the state as it was
// before the update, bitwise (NaN payloads included), and change nothing else: the update and the
// 16-bit copy equal a run without them. Every path, odd sizes, misaligned starts, many tiles; the
// three copies in separate buffers (plain stores) and in one 64-byte aligned block at a common
// misalignment, as the engine lays them out (streaming stores after a ragged head).
TEST(AdamWSimd, PrevCopyHoldsTheStateBeforeTheUpdate) {
  const int64_t sizes[] = {0, 1, 7, 16, 17, 33, 100, 1000, 65537};
  constexpr float kUntouched = -1234.5f;
  for (CpuIsa isa : supported_isas()) {
    for (int64_t n : sizes) {
      for (bool with_out : {false, true}) {
        for (bool adam_w : {true, false}) {
          for (bool block : {false, true}) {
            const int64_t offset = (n + block) % 5;
            AdamArgs args;
            args.lr = 3e-3f;
            args.weight_decay = 0.01f;
            args.adam_w_mode = adam_w;
            args.step = 2;
            const State before = make_state(n, offset, static_cast<uint32_t>(n * 5 + with_out));
            State ref = before;
            adam_update(args, ref.shard(DType::kBF16, with_out), 1.f / 1024.f);
            for (bool reference : {true, false}) {
              State got = before;
              // Three sections of `stride` floats (a multiple of 16) from a 64-byte boundary, or
              // three separate buffers; each copy starts `offset` floats into its section.
              const int64_t stride = (offset + n + 1 + 15) / 16 * 16;
              std::vector<float> store(static_cast<size_t>(3 * stride + 16 + 2 * stride),
                                       kUntouched);
              float* base = store.data();
              while (reinterpret_cast<uintptr_t>(base) % 64 != 0) ++base;
              float* section[3];
              for (int k = 0; k < 3; ++k) {
                // Separate: sections apart by a stride plus k floats (no common misalignment).
                section[k] = base + k * (block ? stride : stride + 1);
              }
              AdamShard s = got.shard(DType::kBF16, with_out);
              s.prev_param = section[0] + offset;
              s.prev_exp_avg = section[1] + offset;
              s.prev_exp_avg_sq = section[2] + offset;
              AdamSimdOptions opts;
              opts.isa = isa;
              opts.tile_numel = 64;
              if (reference) {
                adam_update(args, s, 1.f / 1024.f);
              } else {
                adam_update_simd(args, s, 1.f / 1024.f, opts);
              }
              const std::string what =
                  std::string(reference ? "reference" : cpu_isa_name(isa)) +
                  " n=" + std::to_string(n) + " out=" + std::to_string(with_out) +
                  " adamw=" + std::to_string(adam_w) + " block=" + std::to_string(block);
              expect_same(ref, got, with_out, what.c_str());
              const std::vector<float>* want[3] = {&before.p, &before.m, &before.v};
              for (int k = 0; k < 3; ++k) {
                const float* sec = section[k];
                for (int64_t i = 0; i < offset; ++i) ASSERT_EQ(sec[i], kUntouched) << what;
                if (n > 0) {
                  EXPECT_EQ(std::memcmp(sec + offset, want[k]->data() + offset,
                                        static_cast<size_t>(n) * 4),
                            0)
                      << what << " copy " << k;
                }
                ASSERT_EQ(sec[offset + n], kUntouched) << what << " copy " << k;
              }
              if (HasFailure()) return;
            }
          }
        }
      }
    }
  }
}

TEST(AdamWSimd, RejectsUnsupportedIsaAndBadArgs) {
  State st = make_state(8, 0, 1);
  AdamArgs args;
  args.step = 0;
  EXPECT_DEATH(adam_update_simd(args, st.shard(DType::kBF16, false), 1.f), "step");
  args.step = 1;
  AdamSimdOptions opts;
  opts.tile_numel = 0;
  EXPECT_DEATH(adam_update_simd(args, st.shard(DType::kBF16, false), 1.f, opts), "tile_numel");
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (cpu_isa_supported(isa)) continue;
    opts = {};
    opts.isa = isa;
    EXPECT_DEATH(adam_update_simd(args, st.shard(DType::kBF16, false), 1.f, opts), "supported");
  }
  // prev_*: all three or none.
  State prev = make_state(8, 0, 2);
  AdamShard partial = st.shard(DType::kBF16, false);
  partial.prev_param = prev.p.data();
  partial.prev_exp_avg = prev.m.data();
  EXPECT_DEATH(adam_update_simd(args, partial, 1.f), "prev_");
  EXPECT_DEATH(adam_update(args, partial, 1.f), "prev_");
}

}  // namespace
}  // namespace zero::kernels::cpu
