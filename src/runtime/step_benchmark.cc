// Step benchmark over synthetic tokens (fixed seed), every stage × overlap off/on.
#include "runtime/step_benchmark.h"

#include <omp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "core/device.h"
#include "runtime/engine.h"
#include "runtime/model_source.h"
#include "runtime/offload_pipeline.h"

namespace zero::runtime {

namespace {

struct Measured {
  double step_s = 0;        // mean over timed steps, slowest rank
  double comm_wait_s = 0;   // per step, blocked on collectives (slowest rank)
  int64_t state_bytes = 0;  // master + optimizer + grads + resident params (this rank)
  double wire_bytes = 0;    // per step, every collective's payload (comm.h's accounting)
  // Working parameters (MemoryAccounting::param_bytes: full units at stages 0-2, shards at stage
  // 3) plus, at stage 3, the peak of gathered units alive at once.
  int64_t param_bytes = 0;
  int64_t model_buffer_bytes = 0;  // the model's activation / scratch buffers (Model::buffer_bytes)
  int64_t swap_bytes = 0;          // stage-3 parameter swap file (offloaded_param_bytes)
  // --device cuda: device bytes of the staging copies (Engine::staging_device_bytes: parameters
  // and gradient buffers), and the GPU's memory in use after the timed steps as the driver counts
  // it (cudaMemGetInfo: the CUDA context and other processes included).
  int64_t staging_bytes = 0;
  int64_t gpu_used_bytes = 0;
  std::string offload_line;  // the OffloadPipeline's host times per timed step (device offload)
  std::string param_offload_line;  // offload_param's shard copies per timed step (device path)
};

StatusOr<Measured> measure(const StepBenchOptions& o, const ModelSource& source, Device device,
                           int stage, bool overlap, Communicator& comm, int64_t block) {
  EngineOptions eo;
  eo.model_config = source.config();
  eo.device = device;
  eo.dtype = o.bf16 ? DType::kBF16 : DType::kF32;
  ZERO_ASSIGN_OR_RETURN(eo.optimizer, optim::optimizer_spec_from_json(
                                          "AdamW", {{"lr", 1e-4}, {"weight_decay", 0.1}}));
  eo.schedule = optim::LrSchedule::constant(1e-4);
  // The overlapped CPU Adam needs no clipping (the global norm would scale every unit).
  eo.gradient_clipping = o.offload_overlap ? 0.0 : 1.0;
  eo.offload_overlap = o.offload_overlap;
  if (o.offload_optimizer == "cpu") eo.offload.optimizer = OptimizerOffload::kCpu;
  eo.zero.stage = stage;
  eo.zero.overlap_comm = overlap;
  eo.zero.comm_dtype = eo.dtype;  // DeepSpeed's default communication_data_type
  if (stage == 3 && o.offload_param != "none") {
    sharding::ParamOffloadOptions& po = eo.offload.param;
    po.device =
        o.offload_param == "nvme" ? sharding::ParamOffload::kNvme : sharding::ParamOffload::kCpu;
    po.nvme_path = o.nvme_path.empty()
                       ? (std::filesystem::temp_directory_path() / "zero_bench_step_nvme").string()
                       : o.nvme_path;
    po.max_in_cpu_numel = o.max_in_cpu;
  }
  const Device engine_device = eo.device;
  ZERO_ASSIGN_OR_RETURN(auto engine,
                        Engine::create(std::move(eo), source.init_fn(engine_device), &comm));
  const int64_t V = source.config().vocab_size;
  std::mt19937 rng(1234 + static_cast<unsigned>(comm.rank()));
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(V - 1));
  std::vector<MicroBatch> micro(static_cast<size_t>(o.grad_accum));
  for (auto& mb : micro) {
    mb.batch = o.micro_batch;
    mb.seq = block;
    mb.tokens.resize(static_cast<size_t>(o.micro_batch * block));
    mb.targets.resize(mb.tokens.size());
    for (auto& t : mb.tokens) t = tok(rng);
    for (auto& t : mb.targets) t = tok(rng);
  }
  for (int i = 0; i < stage_warmup_steps(o.warmup, stage); ++i) {
    ZERO_RETURN_IF_ERROR(engine->train_step(micro).status());
  }
  // Why: start the timed window together on every rank.
  ZERO_RETURN_IF_ERROR(comm.barrier());
  const double wait0 = engine->memory().comm_wait_s;
  const std::optional<OffloadTimes> offload0 = engine->offload_times();
  const std::optional<sharding::ParamTransfers> params0 = engine->param_transfers();
  comm.reset_stats();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.steps; ++i) ZERO_RETURN_IF_ERROR(engine->train_step(micro).status());
  // Why a device wait inside the timed region: work the last step queued on the GPU counts.
  if (device == Device::kCuda) ZERO_RETURN_IF_ERROR(cuda_device_synchronize());
  float local[2] = {
      static_cast<float>(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / o.steps),
      static_cast<float>((engine->memory().comm_wait_s - wait0) / o.steps)};
  ZERO_RETURN_IF_ERROR(comm.all_reduce(local, 2, DType::kF32, ReduceOp::kMax));
  Measured m;
  m.wire_bytes = static_cast<double>(comm.stats().total_bytes()) / o.steps;
  m.step_s = local[0];
  m.comm_wait_s = local[1];
  const sharding::MemoryAccounting& mem = engine->memory();
  m.state_bytes = mem.master_bytes + mem.optimizer_state_bytes + mem.grad_bytes + mem.param_bytes;
  m.param_bytes = mem.param_bytes + mem.peak_gathered_param_bytes;
  m.model_buffer_bytes = engine->model().buffer_bytes();
  m.swap_bytes = mem.offloaded_param_bytes;
  m.staging_bytes = engine->staging_device_bytes();
  if (const std::optional<OffloadTimes> offload1 = engine->offload_times(); offload0 && offload1) {
    m.offload_line = offload_log_line(*offload1, *offload0, o.steps);
  }
  if (const std::optional<sharding::ParamTransfers> params1 = engine->param_transfers();
      params0 && params1) {
    m.param_offload_line = param_offload_log_line(*params1, *params0, o.steps);
  }
  if (device == Device::kCuda) {
    ZERO_ASSIGN_OR_RETURN(CudaMemoryInfo gpu, cuda_memory_info());
    m.gpu_used_bytes = gpu.used_bytes;
  }
  return m;
}

}  // namespace

namespace {

// A stage's two rows (overlap_comm off / on) and the offload pipeline's lines (rank 0).
void print_stage_rows(int stage, const Measured& off, const Measured& on, int64_t tokens_per_step,
                      bool cuda) {
  for (bool overlap : {false, true}) {
    const Measured& m = overlap ? on : off;
    std::string hidden = overlap ? fmt::format("{:.2f}", 1e3 * (off.comm_wait_s - on.comm_wait_s))
                                 : std::string("-");
    const std::string gpu_columns =
        cuda ? fmt::format(" {:>12.2f} {:>10.0f}", static_cast<double>(m.staging_bytes) / (1 << 20),
                           static_cast<double>(m.gpu_used_bytes) / (1 << 20))
             : std::string();
    std::printf("%-6d %-8s %10.2f %10.0f %12.2f %14s %12.2f %14.2f %10.2f %12.2f %10.2f%s\n", stage,
                overlap ? "on" : "off", 1e3 * m.step_s,
                static_cast<double>(tokens_per_step) / m.step_s, 1e3 * m.comm_wait_s,
                hidden.c_str(), static_cast<double>(m.state_bytes) / (1 << 20),
                m.wire_bytes / (1 << 20), static_cast<double>(m.param_bytes) / (1 << 20),
                static_cast<double>(m.model_buffer_bytes) / (1 << 20),
                static_cast<double>(m.swap_bytes) / (1 << 20), gpu_columns.c_str());
  }
  for (bool overlap : {false, true}) {
    const Measured& m = overlap ? on : off;
    if (!m.offload_line.empty()) {
      std::printf("  stage %d overlap_comm %s: %s\n", stage, overlap ? "on" : "off",
                  m.offload_line.c_str());
    }
    if (!m.param_offload_line.empty()) {
      std::printf("  stage %d overlap_comm %s: %s\n", stage, overlap ? "on" : "off",
                  m.param_offload_line.c_str());
    }
  }
}

// What the columns mean.
void print_legend(bool cuda) {
  std::printf(
      "comm wait: time the compute thread blocked on collectives; hidden: how much of it "
      "overlap_comm removed (same run, same data); wire: bytes moved by this rank's collectives "
      "per step (gradients in communication_data_type = the model dtype, gathers in the model "
      "dtype); param: working parameters (full units, or shards plus the peak of gathered units "
      "at stage 3: host shards, NVMe staging and loaded shards included); model: the model's "
      "activation and scratch buffers; swap: stage-3 shards in the NVMe swap file "
      "(--offload_param nvme); stage 3 warms up at least %d steps (its second step still moves "
      "one full gather more)\n",
      kStage3WarmupSteps);
  if (cuda) {
    std::printf(
        "device cuda: step times end with a device synchronize; model: the CUDA model's device "
        "buffers; staging: device copies of the parameters and gradients (the ZeRO state stays "
        "in host memory); GPU: memory in use on the GPU after the timed steps (cudaMemGetInfo: "
        "the CUDA context and other processes included)\n");
  }
}

}  // namespace

int run_step_benchmark(const StepBenchOptions& o, Communicator& comm) {
  omp_set_num_threads(default_compute_threads(comm));
  const bool lead = comm.rank() == 0;
  // Before anything is printed, agreed by every rank (one without a GPU stops them all).
  const StatusOr<Device> device = parse_device_flag(o.device);
  const Status usable = device.ok() ? check_device_usable(*device) : device.status();
  float refused = usable.ok() ? 0.0f : 1.0f;
  Status agreed = comm.all_reduce(&refused, 1, DType::kF32, ReduceOp::kMax);
  if (!usable.ok() || !agreed.ok() || refused > 0) {
    const Status& why = !usable.ok() ? usable : agreed;
    if (!why.ok()) {
      std::fprintf(stderr, "error: rank %d: %s\n", comm.rank(), why.message().c_str());
    }
    return agreed.ok() ? 2 : 1;
  }
  const bool cuda = *device == Device::kCuda;
  auto source = ModelSource::open(o.model, 42);
  if (!source.ok()) {
    std::fprintf(stderr, "error: --model %s: %s\n", o.model.c_str(),
                 source.status().message().c_str());
    return 2;
  }
  const model::ModelConfig& mc = (*source)->config();
  const int64_t block =
      o.block_size > 0 ? o.block_size : std::min<int64_t>(256, mc.max_position_embeddings);
  const int64_t tokens_per_step = o.micro_batch * o.grad_accum * block * comm.world_size();
  if (lead) {
    std::printf(
        "zero bench step: %s (%.2fM params), world %d, %d threads/rank, micro %lld x accum "
        "%lld x T %lld = %lld tokens/step, %s, device %s\n",
        o.model.c_str(), static_cast<double>(count_params(mc).total) / 1e6, comm.world_size(),
        omp_get_max_threads(), static_cast<long long>(o.micro_batch),
        static_cast<long long>(o.grad_accum), static_cast<long long>(block),
        static_cast<long long>(tokens_per_step), o.bf16 ? "bf16" : "fp32",
        cuda ? probe_cuda().description.c_str() : "cpu");
    if (o.offload_optimizer == "cpu") {
      std::printf("offload_optimizer cpu: the CPU Adam %s\n",
                  o.offload_overlap ? "overlapping backward where exact (--offload_overlap; "
                                      "gradient_clipping 0)"
                                    : "after backward (gradient_clipping 1.0)");
    }
    std::printf("%-6s %-8s %10s %10s %12s %14s %12s %14s %10s %12s %10s%s\n", "stage", "overlap",
                "step ms", "tokens/s", "comm wait ms", "hidden ms/step", "state MiB",
                "wire MiB/step", "param MiB", "model MiB", "swap MiB",
                cuda ? fmt::format(" {:>12} {:>10}", "staging MiB", "GPU MiB").c_str() : "");
  }
  for (int stage : o.stages) {
    Measured off, on;
    for (bool overlap : {false, true}) {
      auto m = measure(o, **source, *device, stage, overlap, comm, block);
      if (!m.ok()) {
        std::fprintf(stderr, "error: rank %d: stage %d: %s\n", comm.rank(), stage,
                     m.status().message().c_str());
        return 1;
      }
      (overlap ? on : off) = *m;
    }
    if (lead) print_stage_rows(stage, off, on, tokens_per_step, cuda);
  }
  if (lead) print_legend(cuda);
  return 0;
}

}  // namespace zero::runtime
