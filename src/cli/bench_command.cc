// `zero bench`: micro benchmarks that print ratios against a baseline measured in the same run.
//   adam  the SIMD CPU AdamW (kernels/adamw) vs STREAM triad, the scalar reference and PyTorch
//   (docs/offload.md) aio   NVMe swapper read/write vs fio on the same file system (docs/nvme.md)
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/world.h"
#include "kernels/adamw/adamw_benchmark.h"
#include "offload/aio_benchmark.h"
#include "runtime/ckpt_benchmark.h"
#include "runtime/step_benchmark.h"

namespace zero::cli {
namespace {

void add_adam(CLI::App* bench, int& exit_code) {
  auto opts = std::make_shared<kernels::cpu::AdamBenchOptions>();
  auto isa = std::make_shared<std::string>("auto");
  CLI::App* adam = bench->add_subcommand("adam", "CPU Adam vs STREAM triad, reference, PyTorch");
  adam->add_option("--numel", opts->numel, "parameters (fp32 state = 16 B each)");
  adam->add_option("--threads", opts->threads, "OpenMP threads (0: OMP_NUM_THREADS)");
  adam->add_option("--iters", opts->iters, "timed steps per configuration");
  adam->add_option("--param-16bit", opts->param_16bit, "16-bit param copy: bf16, f16 or none");
  adam->add_option("--isa", *isa, "auto, scalar, avx2 or avx512");
  adam->add_flag("!--no-reference", opts->scalar_reference,
                 "skip the scalar reference adam_update");
  adam->add_flag("!--no-torch", opts->torch, "skip the PyTorch comparison");
  adam->add_option("--python", opts->python, "python with torch");
  adam->add_option("--torch-script", opts->torch_script,
                   "default: <source>/tools/bench_adam_torch.py");
  adam->add_flag(
      "!--no-bf16-state", opts->bf16_state,
      "skip the bf16-state rows (bf16_master_weights_and_grads / bf16_optimizer_states)");
  adam->add_option("--deepspeed-python", opts->deepspeed_python,
                   "python with deepspeed 0.19: DeepSpeedCPUAdam's bf16 state side by side");
  adam->add_option("--deepspeed-script", opts->deepspeed_script,
                   "default: <source>/tools/bench_adam_deepspeed.py");
  adam->callback([opts, isa, &exit_code] {
    if (!kernels::cpu::parse_cpu_isa(*isa, &opts->isa)) {
      std::fprintf(stderr, "error: zero bench adam: unknown --isa %s\n", isa->c_str());
      exit_code = 2;
      return;
    }
    exit_code = kernels::cpu::run_adam_benchmark(*opts);
  });
}

void add_aio(CLI::App* bench, int& exit_code) {
  auto opts = std::make_shared<offload::AioBenchOptions>();
  auto size_mib = std::make_shared<uint64_t>(1024);
  CLI::App* aio = bench->add_subcommand("aio", "NVMe swapper read/write GB/s next to fio");
  aio->add_option("--dir", opts->dir, "directory on the NVMe (default /tmp)");
  aio->add_option("--size-mib", *size_mib, "bytes per pass in MiB (default 1024)");
  aio->add_option("--block-size", opts->aio.block_size_bytes, "aio.block_size in bytes");
  aio->add_option("--queue-depth", opts->aio.queue_depth, "aio.queue_depth");
  aio->add_option("--intra-op-parallelism", opts->aio.intra_op_parallelism, "worker threads");
  aio->add_flag("--single-submit", opts->aio.single_submit, "one submit per block");
  aio->add_option("--overlap-events", opts->aio.overlap_events,
                  "keep the ring full (default true)");
  aio->add_option("--repeats", opts->repeats, "passes; the median is reported");
  aio->add_option("--fio", opts->fio_path, "fio binary (default /usr/bin/fio)");
  aio->add_flag(
      "--no-fio", [opts](int64_t) { opts->run_fio = false; }, "skip fio");
  aio->callback([opts, size_mib, &exit_code] {
    opts->file_bytes = *size_mib << 20;
    exit_code = offload::run_aio_benchmark(*opts);
  });
}

void add_step(CLI::App* bench, int& exit_code) {
  auto opts = std::make_shared<runtime::StepBenchOptions>();
  CLI::App* step = bench->add_subcommand(
      "step",
      "training-step time per ZeRO stage, overlap_comm off vs on (run under mpirun for N ranks)");
  step->add_option("--model", opts->model,
                   "preset:NAME or an HF directory (default preset:gpt2-tiny)");
  step->add_option("--stages", opts->stages, "stages to time (default 0 1 2 3)");
  step->add_option("--micro_batch,--micro-batch", opts->micro_batch, "per-rank micro-batch")
      ->check(int_at_least(1));
  step->add_option("--grad_accum,--grad-accum", opts->grad_accum, "micro-steps per step")
      ->check(int_at_least(1));
  step->add_option("--block_size,--block-size", opts->block_size, "tokens per sample")
      ->check(int_at_least(1));
  step->add_option("--steps", opts->steps, "timed steps per configuration")->check(int_at_least(1));
  step->add_option("--warmup", opts->warmup,
                   "untimed steps first (stage 3: at least 2, until its prefetch is steady)")
      ->check(int_at_least(0));
  step->add_flag("--bf16", opts->bf16, "bf16 model dtype");
  step->add_option("--device", opts->device,
                   "cpu (default) | cuda: the model on each rank's GPU, the ZeRO state and "
                   "optimizer there too unless offloaded; steps timed to a device synchronize, "
                   "device memory reported");
  step->add_option("--offload_param,--offload-param", opts->offload_param,
                   "stage 3's offload_param device: none (default), cpu or nvme")
      ->check(CLI::IsMember({"none", "cpu", "nvme"}));
  step->add_option("--nvme_path,--nvme-path", opts->nvme_path,
                   "swap directory for --offload_param nvme (default: under the temp directory)");
  step->add_option("--max_in_cpu,--max-in-cpu", opts->max_in_cpu,
                   "--offload_param nvme: shard elements kept in memory (default 0: every shard "
                   "but the persistent ones on NVMe)");
  step->add_option("--offload_optimizer,--offload-optimizer", opts->offload_optimizer,
                   "zero_optimization.offload_optimizer device: none (default) or cpu (with "
                   "--device cuda the offload pipeline; its host times are printed per stage)")
      ->check(CLI::IsMember({"none", "cpu"}));
  step->add_flag("--offload_overlap,--offload-overlap", opts->offload_overlap,
                 "with --offload_optimizer cpu: the CPU Adam during backward where exact "
                 "(zero train --offload_overlap; gradient_clipping 0 instead of 1.0)");
  step->callback([opts, &exit_code] {
    if (opts->offload_overlap && opts->offload_optimizer != "cpu") {
      std::fprintf(stderr, "error: --offload_overlap needs --offload_optimizer cpu\n");
      exit_code = 2;
      return;
    }
    auto world = make_world();
    if (!world.ok()) {
      std::fprintf(stderr, "error: %s\n", world.status().message().c_str());
      exit_code = 1;
      return;
    }
    exit_code = runtime::run_step_benchmark(*opts, *world->comm);
  });
}

void add_ckpt(CLI::App* bench, int& exit_code) {
  auto opts = std::make_shared<runtime::CkptBenchOptions>();
  CLI::App* ck = bench->add_subcommand(
      "ckpt", "checkpoint save/load time and bytes read per rank when resharding");
  ck->add_option("--model", opts->model,
                 "preset:NAME or an HF directory (default preset:gpt2-mini)");
  ck->add_option("--dir", opts->dir, "checkpoint directory (default: a temporary one)");
  ck->add_option("--stage", opts->stage, "ZeRO stage of the saving run (default 3)");
  ck->add_option("--load_worlds,--load-worlds", opts->load_worlds, "world sizes to load at");
  ck->callback([opts, &exit_code] {
    auto world = make_world();
    if (!world.ok()) {
      std::fprintf(stderr, "error: %s\n", world.status().message().c_str());
      exit_code = 1;
      return;
    }
    exit_code = runtime::run_ckpt_benchmark(*opts, *world->comm);
  });
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  CLI::App* bench = app.add_subcommand(
      "bench", "micro and step benchmarks (adam, aio, step, ckpt; comm planned)");
  bench->require_subcommand(1);
  add_adam(bench, exit_code);
  add_aio(bench, exit_code);
  add_unimplemented_command(*bench, exit_code, "comm", "collective bandwidth per ZeRO stage",
                            "planned: a later release");
  add_step(bench, exit_code);
  add_ckpt(bench, exit_code);
}

}  // namespace zero::cli
