// CPU Adam benchmark: bytes-per-second against a same-size STREAM triad, the scalar reference
// adam_update and (when importable) torch.optim.AdamW via tools/bench_adam_torch.py; the bf16-state
// update, and DeepSpeedCPUAdam's on the same values via tools/bench_adam_deepspeed.py.
#include "kernels/adamw/adamw_benchmark.h"

#include <omp.h>
#include <stdlib.h>  // mkdtemp

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/build_info.h"
#include "core/tensor.h"
#include "kernels/adamw/adamw.h"
#include "kernels/elementwise/elementwise.h"

namespace zero::kernels::cpu {
namespace {

// Median and best step time. The best is reported too: on a shared 2-core host the median
// includes whatever else was running.
struct Timing {
  double median;
  double best;
};

Timing time_steps(int iters, const std::function<void(int)>& body) {
  body(0);  // warm-up: page faults, thread pool start
  std::vector<double> times;
  for (int i = 1; i <= iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    body(i);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return {times[times.size() / 2], times.front()};
}

// A cheap deterministic fill in [-1, 1), parallel so pages are first touched by the workers.
void fill(float* x, int64_t n, uint32_t seed, float scale, bool positive) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed * 40503u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float u = static_cast<float>(h >> 8) * (1.0f / 8388608.0f) - 1.0f;
    x[i] = scale * (positive ? u * u : u);
  }
}

// One row of the report: what ran, its timing and the bytes it moves per parameter.
struct Row {
  std::string name;
  Timing t;
  double bytes_per_elem;
};

// A bf16 state of n elements (bf16 master weights; moments in bf16 and in fp32) and fp32 grads.
struct Bf16Bench {
  AlignedBuffer p, m16, v16, m32, v32, g;
  int64_t n = 0;

  explicit Bf16Bench(int64_t numel) : n(numel) {
    const size_t n2 = static_cast<size_t>(n) * 2, n4 = static_cast<size_t>(n) * 4;
    p = aligned_alloc_bytes(n2);
    m16 = aligned_alloc_bytes(n2);
    v16 = aligned_alloc_bytes(n2);
    m32 = aligned_alloc_bytes(n4);
    v32 = aligned_alloc_bytes(n4);
    g = aligned_alloc_bytes(n4);
    float* f[3] = {reinterpret_cast<float*>(m32.get()), reinterpret_cast<float*>(v32.get()),
                   reinterpret_cast<float*>(g.get())};
    fill(f[0], n, 3, 0.1f, false);
    fill(f[1], n, 4, 0.01f, true);
    fill(f[2], n, 2, 1.f, false);
    // The master weights, the bf16 moments and the gradients hold bf16 values (DeepSpeed's
    // gradients are bf16 with a bf16 master): every input is the same in both implementations.
    cast_from_f32(f[0], m16.get(), DType::kBF16, n);
    cast_from_f32(f[1], v16.get(), DType::kBF16, n);
    round_to_dtype(f[2], f[2], static_cast<size_t>(n), DType::kBF16);
    std::vector<float> init(static_cast<size_t>(n));
    fill(init.data(), n, 1, 1.f, false);
    cast_from_f32(init.data(), p.get(), DType::kBF16, n);
  }
  AdamShard shard(bool bf16_moments) const {
    AdamShard s;
    s.param_bf16 = reinterpret_cast<bf16*>(p.get());
    s.grad = reinterpret_cast<const float*>(g.get());
    if (bf16_moments) {
      s.exp_avg_bf16 = reinterpret_cast<bf16*>(m16.get());
      s.exp_avg_sq_bf16 = reinterpret_cast<bf16*>(v16.get());
    } else {
      s.exp_avg = reinterpret_cast<float*>(m32.get());
      s.exp_avg_sq = reinterpret_cast<float*>(v32.get());
    }
    s.numel = n;
    return s;
  }
};

// Raw bytes to DIR/name (the DeepSpeed script reads them with numpy.fromfile).
bool write_raw(const std::string& dir, const char* name, const void* data, size_t bytes) {
  FILE* f = std::fopen((dir + "/" + name).c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(data, 1, bytes, f) == bytes;
  return std::fclose(f) == 0 && ok;
}

// The bf16-state update (DeepSpeed's bf16_master_weights_and_grads / bf16_optimizer_states) on
// the SIMD path and the scalar reference: 16 B/param moved with bf16 moments (param, m, v read and
// written, fp32 grad read), 24 with fp32 moments.
void add_bf16_state_rows(const AdamBenchOptions& o, const AdamSimdOptions& copts, int64_t* step,
                         std::vector<Row>* rows) {
  Bf16Bench b(o.numel);
  AdamArgs args;
  args.weight_decay = 0.01f;
  const std::string isa(cpu_isa_name(copts.isa));
  for (bool bf16_moments : {true, false}) {
    const AdamShard s = b.shard(bf16_moments);
    const std::string what =
        bf16_moments ? "bf16 state (master + moments)" : "bf16 master, fp32 moments";
    const double bytes = bf16_moments ? 16 : 24;
    rows->push_back({"adam_update_simd " + isa + " " + what,
                     time_steps(o.iters,
                                [&](int) {
                                  args.step = ++*step;
                                  adam_update_simd(args, s, 1.f, copts);
                                }),
                     bytes});
    if (o.scalar_reference && bf16_moments) {
      rows->push_back({"adam_update (reference) " + what,
                       time_steps(o.iters,
                                  [&](int) {
                                    args.step = ++*step;
                                    adam_update(args, s, 1.f);
                                  }),
                       bytes});
    }
  }
}

// DeepSpeedCPUAdam with bf16 state next to ours: writes a bf16 state and K steps of bf16-valued
// gradients to a temporary directory with our result after K steps, then runs the script, which
// repeats the K steps with DeepSpeedCPUAdam(fp32_optimizer_states=False), compares values and
// times DeepSpeed's update at o.numel. Prints the script's report.
void run_deepspeed(const AdamBenchOptions& o, const AdamSimdOptions& copts, int threads) {
  char dir_template[] = "/tmp/zero_bench_adam_ds_XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) {
    std::printf("DeepSpeed comparison skipped: cannot create a temporary directory\n");
    return;
  }
  constexpr int kSteps = 3;
  const int64_t n = std::min<int64_t>(o.numel, int64_t{1} << 20);
  Bf16Bench b(n);
  const size_t n2 = static_cast<size_t>(n) * 2;
  bool ok = write_raw(dir, "p0.bf16", b.p.get(), n2) &&
            write_raw(dir, "m0.bf16", b.m16.get(), n2) &&
            write_raw(dir, "v0.bf16", b.v16.get(), n2);
  AdamArgs args;
  args.lr = 1e-3f;
  args.weight_decay = 0.01f;
  std::vector<uint16_t> g16(static_cast<size_t>(n));
  auto* g = reinterpret_cast<float*>(b.g.get());
  for (int k = 1; k <= kSteps && ok; ++k) {
    fill(g, n, 100 + k, 1.f, false);
    cast_from_f32(g, g16.data(), DType::kBF16, n);
    convert_to_f32(g16.data(), DType::kBF16, g, static_cast<size_t>(n));
    ok = write_raw(dir, ("g" + std::to_string(k) + ".bf16").c_str(), g16.data(), n2);
    args.step = k;
    adam_update_simd(args, b.shard(true), 1.f, copts);
  }
  ok = ok && write_raw(dir, "ours_p.bf16", b.p.get(), n2) &&
       write_raw(dir, "ours_m.bf16", b.m16.get(), n2) &&
       write_raw(dir, "ours_v.bf16", b.v16.get(), n2);
  if (!ok) {
    std::printf("DeepSpeed comparison skipped: cannot write %s\n", dir);
    return;
  }
  const std::string script = o.deepspeed_script.empty()
                                 ? std::string(ZERO_SOURCE_ROOT) + "/tools/bench_adam_deepspeed.py"
                                 : o.deepspeed_script;
  const std::string cmd =
      "OMP_NUM_THREADS=" + std::to_string(threads) + " " + o.deepspeed_python + " " + script +
      " --dir " + dir + " --numel " + std::to_string(n) + " --steps " + std::to_string(kSteps) +
      " --bench-numel " + std::to_string(o.numel) + " --threads " + std::to_string(threads) +
      " --iters " + std::to_string(o.iters) + " --lr " + std::to_string(args.lr) +
      " --weight-decay " + std::to_string(args.weight_decay) + " 2>&1";
  std::printf("\n### DeepSpeedCPUAdam, bf16 state, side by side\n\n");
  std::fflush(stdout);
  const int rc = std::system(cmd.c_str());
  if (rc != 0) std::printf("(the DeepSpeed script exited with status %d)\n", rc);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

struct TorchResult {
  bool ran = false;
  double params_per_s = 0;
  std::string output;
};

TorchResult run_torch(const AdamBenchOptions& o, int threads) {
  TorchResult r;
  const std::string probe = o.python + " -c 'import torch' >/dev/null 2>&1";
  if (std::system(probe.c_str()) != 0) {
    r.output = "torch not importable with " + o.python + ": skipped\n";
    return r;
  }
  const std::string script = o.torch_script.empty()
                                 ? std::string(ZERO_SOURCE_ROOT) + "/tools/bench_adam_torch.py"
                                 : o.torch_script;
  const std::string cmd = o.python + " " + script + " --numel " + std::to_string(o.numel) +
                          " --threads " + std::to_string(threads) + " --iters " +
                          std::to_string(o.iters) + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  char line[512];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    r.output += line;
    double v = 0;
    // The script's machine-readable line: the foreach=True AdamW rate.
    if (std::sscanf(line, "RESULT adamw_foreach_params_per_s=%lf", &v) == 1) {
      r.params_per_s = v;
      r.ran = true;
    }
  }
  pclose(pipe);
  return r;
}

}  // namespace

int run_adam_benchmark(const AdamBenchOptions& o) {
  if (o.numel <= 0 || o.iters <= 0) {
    std::fprintf(stderr, "bench adam: numel and iters must be positive\n");
    return 2;
  }
  const bool no_copy = o.param_16bit == "none";
  const std::optional<DType> copy_dtype =
      no_copy ? std::optional<DType>(DType::kBF16) : parse_dtype(o.param_16bit);  // bf16: unused
  if (!copy_dtype || *copy_dtype == DType::kF32) {
    std::fprintf(stderr, "bench adam: --param-16bit must be bf16, f16 or none\n");
    return 2;
  }
  const CpuIsa isa = o.isa == CpuIsa::kAuto ? best_cpu_isa() : o.isa;
  if (!cpu_isa_supported(isa)) {
    std::fprintf(stderr, "bench adam: this CPU lacks %s\n", std::string(cpu_isa_name(isa)).c_str());
    return 2;
  }
  const int saved_threads = omp_get_max_threads();
  const int threads = o.threads > 0 ? o.threads : saved_threads;
  omp_set_num_threads(threads);  // the scalar reference and the triad use the default team

  const int64_t n = o.numel;
  const size_t f32_bytes = static_cast<size_t>(n) * 4;
  AlignedBuffer p = aligned_alloc_bytes(f32_bytes), g = aligned_alloc_bytes(f32_bytes),
                m = aligned_alloc_bytes(f32_bytes), v = aligned_alloc_bytes(f32_bytes),
                half = aligned_alloc_bytes(static_cast<size_t>(n) * 2);
  AdamShard shard;
  shard.param = reinterpret_cast<float*>(p.get());
  shard.grad = reinterpret_cast<float*>(g.get());
  shard.exp_avg = reinterpret_cast<float*>(m.get());
  shard.exp_avg_sq = reinterpret_cast<float*>(v.get());
  shard.numel = n;
  fill(shard.param, n, 1, 1.f, false);
  fill(const_cast<float*>(shard.grad), n, 2, 1024.f, false);
  fill(shard.exp_avg, n, 3, 0.1f, false);
  fill(shard.exp_avg_sq, n, 4, 0.01f, true);
  AdamShard with_copy = shard;
  with_copy.param_16bit = half.get();
  with_copy.param_16bit_dtype = *copy_dtype;

  AdamArgs args;
  args.weight_decay = 0.01f;
  const float grad_scale = 1.f / 1024.f;
  AdamSimdOptions copts;
  copts.isa = isa;
  copts.num_threads = threads;
  int64_t step = 0;
  auto ours = [&](const AdamShard& s) {
    return time_steps(o.iters, [&](int) {
      args.step = ++step;
      adam_update_simd(args, s, grad_scale, copts);
    });
  };
  auto reference = [&](const AdamShard& s) {
    return time_steps(o.iters, [&](int) {
      args.step = ++step;
      adam_update(args, s, grad_scale);
    });
  };

  // STREAM triad over three arrays whose total size equals the four fp32 Adam arrays.
  const int64_t tn = n * 4 / 3;
  const size_t t_bytes = static_cast<size_t>(tn) * 4;
  AlignedBuffer ta = aligned_alloc_bytes(t_bytes), tb = aligned_alloc_bytes(t_bytes),
                tc = aligned_alloc_bytes(t_bytes);
  float* a = reinterpret_cast<float*>(ta.get());
  float* b = reinterpret_cast<float*>(tb.get());
  float* c = reinterpret_cast<float*>(tc.get());
  fill(a, tn, 5, 1.f, false);
  fill(b, tn, 6, 1.f, false);
  fill(c, tn, 7, 1.f, false);
  const Timing triad = time_steps(o.iters, [&](int it) {
    const float scalar = 1.0f + 1e-3f * static_cast<float>(it);
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < tn; ++i) a[i] = b[i] + scalar * c[i];
  });
  // STREAM's convention: 3 x 4 B per element (the write-allocate read of `a` is not counted).
  const double triad_gbs = 12.0 * static_cast<double>(tn) / triad.median / 1e9;

  std::vector<Row> rows;
  const std::string copy_name = "+" + std::string(dtype_name(*copy_dtype)) + " copy";
  rows.push_back({"adam_update_simd " + std::string(cpu_isa_name(isa)), ours(shard), 28});
  if (!no_copy) {
    rows.push_back({"adam_update_simd " + std::string(cpu_isa_name(isa)) + " " + copy_name,
                    ours(with_copy), 30});
    // The same copy as a second pass over the updated params (what the offload pipeline's
    // upload did before the Adam wrote its slot).
    rows.push_back({"adam_update_simd " + std::string(cpu_isa_name(isa)) + " then cast_from_f32",
                    time_steps(o.iters,
                               [&](int) {
                                 args.step = ++step;
                                 adam_update_simd(args, shard, grad_scale, copts);
                                 cast_from_f32(shard.param, half.get(), *copy_dtype, n);
                               }),
                    30});
  }
  // The overlapped offload update's rollback copy of param, exp_avg and exp_avg_sq (12 B/param
  // more written): as three single-threaded memcpys before the update (what runtime/engine.cc
  // did), as OpenMP-parallel ones, and fused into the update (AdamShard::prev_*).
  {
    // One float of slack: the plain-store row below shifts one copy off the others' alignment.
    AlignedBuffer kp = aligned_alloc_bytes(f32_bytes), km = aligned_alloc_bytes(f32_bytes + 4),
                  kv = aligned_alloc_bytes(f32_bytes);
    float* keep[3] = {reinterpret_cast<float*>(kp.get()), reinterpret_cast<float*>(km.get()),
                      reinterpret_cast<float*>(kv.get())};
    for (float* k : keep) fill(k, n, 8, 0.f, false);  // first touch by the workers
    const float* state[3] = {shard.param, shard.exp_avg, shard.exp_avg_sq};
    const std::string name = "adam_update_simd " + std::string(cpu_isa_name(isa));
    rows.push_back({name + " + rollback copy (3 memcpy, 1 thread)",
                    time_steps(o.iters,
                               [&](int) {
                                 for (int k = 0; k < 3; ++k)
                                   std::memcpy(keep[k], state[k], f32_bytes);
                                 args.step = ++step;
                                 adam_update_simd(args, shard, grad_scale, copts);
                               }),
                    40});
    rows.push_back({name + " + rollback copy (3 memcpy, OpenMP)",
                    time_steps(o.iters,
                               [&](int) {
                                 const int64_t chunk = int64_t{1} << 16;
                                 const int64_t chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) collapse(2) num_threads(threads)
                                 for (int k = 0; k < 3; ++k) {
                                   for (int64_t c = 0; c < chunks; ++c) {
                                     const int64_t lo = c * chunk, hi = std::min(n, lo + chunk);
                                     std::memcpy(keep[k] + lo, state[k] + lo,
                                                 static_cast<size_t>(hi - lo) * 4);
                                   }
                                 }
                                 args.step = ++step;
                                 adam_update_simd(args, shard, grad_scale, copts);
                               }),
                    40});
    AdamShard saving = shard;
    saving.prev_param = keep[0];
    saving.prev_exp_avg = keep[1];
    saving.prev_exp_avg_sq = keep[2];
    rows.push_back({name + " + rollback copy (fused prev_*, streamed)", ours(saving), 40});
    // The copies at different alignments: plain (cached) stores.
    saving.prev_exp_avg = keep[1] + 1;
    rows.push_back({name + " + rollback copy (fused prev_*, plain stores)", ours(saving), 40});
  }
  Timing ref_s{}, ref_copy_s{};
  if (o.scalar_reference) {
    ref_s = reference(shard);
    rows.push_back({"adam_update (reference)", ref_s, 28});
    if (!no_copy) {
      ref_copy_s = reference(with_copy);
      rows.push_back({"adam_update (reference) " + copy_name, ref_copy_s, 30});
    }
  }

  if (o.bf16_state) add_bf16_state_rows(o, copts, &step, &rows);

  std::printf("## CPU Adam benchmark\n\n");
  std::printf(
      "numel %lld (%.0f MiB fp32 state in 4 arrays), threads %d, isa %s, %d timed steps each\n\n",
      static_cast<long long>(n), 16.0 * static_cast<double>(n) / (1 << 20), threads,
      std::string(cpu_isa_name(isa)).c_str(), o.iters);
  std::printf(
      "| kernel | ms/step (median) | ms/step (best) | Gparams/s | GB/s (28 B/param, 30 with "
      "copy, 40 with rollback copy; bf16 state 16, with fp32 moments 24) | vs triad |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    const double gbs = r.bytes_per_elem * static_cast<double>(n) / r.t.median / 1e9;
    std::printf("| %s | %.2f | %.2f | %.3f | %.1f | %.2f |\n", r.name.c_str(), r.t.median * 1e3,
                r.t.best * 1e3, static_cast<double>(n) / r.t.median / 1e9, gbs, gbs / triad_gbs);
  }
  std::printf("| STREAM triad (3 arrays, same total bytes) | %.2f | %.2f | | %.1f | 1.00 |\n\n",
              triad.median * 1e3, triad.best * 1e3, triad_gbs);
  std::printf(
      "Rates use the median. GB/s counts each array once (in-place writes need no extra\n"
      "read); the triad counts 12 B/element as STREAM does.\n\n");
  const double ours_pps = static_cast<double>(n) / rows[0].t.median;
  if (o.scalar_reference) {
    std::printf("adam_update_simd / reference speed-up: %.2fx", ref_s.median / rows[0].t.median);
    if (!no_copy) {
      std::printf(" (%s: %.2fx)", copy_name.c_str(), ref_copy_s.median / rows[1].t.median);
    }
    std::printf("\n");
  }
  if (o.torch) {
    const TorchResult t = run_torch(o, threads);
    std::printf("\n%s", t.output.c_str());
    if (t.ran && t.params_per_s > 0) {
      std::printf("adam_update_simd / torch AdamW(foreach=True) speed-up: %.2fx\n",
                  ours_pps / t.params_per_s);
    }
  }
  if (!o.deepspeed_python.empty()) run_deepspeed(o, copts, threads);
  omp_set_num_threads(saved_threads);
  return 0;
}

}  // namespace zero::kernels::cpu
