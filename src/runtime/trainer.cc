// `zero train`: config resolution, data, engine, the step loop, metrics and logs.
#include "runtime/trainer.h"

#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/deepspeed_dir.h"
#include "checkpoint/tokenizer_files.h"
#include "config/ds_config.h"
#include "config/effective.h"
#include "config/loader.h"
#include "config/validate.h"
#include "core/device.h"
#include "core/storage.h"
#include "data/batch_sampler.h"
#include "data/token_dataset.h"
#include "model/hf_checkpoint.h"
#include "optim/loss_scaler.h"
#include "runtime/deepspeed_resume.h"
#include "runtime/effective_config_file.h"
#include "runtime/engine_checkpoint.h"
#include "runtime/evaluation.h"
#include "runtime/interrupt.h"
#include "runtime/metrics.h"
#include "runtime/mfu.h"
#include "runtime/model_source.h"
#include "runtime/progress.h"
#include "runtime/resume_notes.h"
#include "runtime/run_fingerprint.h"
#include "runtime/run_lock.h"
#include "runtime/run_plan.h"
#include "runtime/start_agreement.h"
#include "runtime/step_stats.h"
#include "runtime/train_data.h"
#include "runtime/train_monitor.h"
#include "runtime/train_steps.h"

namespace zero::runtime {

namespace {

// The directory --model names (it may name config.json inside it); a preset names none.
std::string model_dir_of(const std::string& model) {
  const std::filesystem::path p(model);
  return p.filename() == "config.json" ? p.parent_path().string() : model;
}

using config::Json;

// A failure with its exit status: 2 = bad input, 1 = runtime failure.
struct Failure {
  int exit_code;
  Status status;
};

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

nlohmann::json sampler_json(const SamplerState& s) {
  return {{"next_step", s.next_step},
          {"seed", s.seed},
          {"order", std::string(data_order_name(s.order))},
          {"num_samples", s.num_samples},
          {"train_batch_size", s.train_batch_size}};
}

SamplerState sampler_from_json(const nlohmann::json& j) {
  SamplerState s;
  s.next_step = j.value("next_step", int64_t{0});
  s.seed = j.value("seed", uint64_t{0});
  s.order = j.value("order", std::string("sequential")) == "shuffle" ? DataOrder::kShuffle
                                                                     : DataOrder::kSequential;
  s.num_samples = j.value("num_samples", int64_t{0});
  s.train_batch_size = j.value("train_batch_size", int64_t{0});
  return s;
}

// Removes OUT/latest and every OUT/global_step<N> directory (a run being overwritten).
Status remove_checkpoints(const std::string& out_dir) {
  Storage& storage = *default_storage();
  if (!storage.file_exists(out_dir)) return ok_status();
  ZERO_ASSIGN_OR_RETURN(std::vector<std::string> names, storage.list_dir(out_dir));
  const std::string latest = out_dir + "/latest";
  if (storage.file_exists(latest)) ZERO_RETURN_IF_ERROR(storage.remove_file(latest));
  for (const auto& name : names) {
    if (name.rfind("global_step", 0) == 0) {
      ZERO_RETURN_IF_ERROR(storage.remove_dir(out_dir + "/" + name));
    }
  }
  return ok_status();
}

int fail(const Failure& f, int rank, int world) {
  // One whole line (one write), "[rank R] error: ..." when there are several ranks.
  std::fprintf(stderr, "%s\n", rank_error_line(rank, world, f.status.message()).c_str());
  return f.exit_code;
}

// One `zero train` job on this rank, phase by phase (run() lists them). A phase that fails returns
// the exit code to end with; std::nullopt means "go on".
using Exit = std::optional<int>;

class TrainingRun {
 public:
  TrainingRun(const TrainArgs& args, Communicator& comm)
      : args_(args),
        comm_(comm),
        rank_(comm.rank()),
        world_(comm.world_size()),
        lead_(rank_ == 0),
        // Rank 0's stdout: a live line only on a terminal this process owns (never under a
        // launcher).
        progress_(lead_ ? choose_progress_mode(console_facts_of_this_process(world_, args.quiet))
                        : ProgressMode::kPlainLines,
                  stdout),
        metrics_path_(args.output_dir + "/metrics.jsonl") {}

  int run();

 private:
  // Until the ranks agreed to start, a failure is reported through the agreement, which stops
  // every rank with it; after that, a rank that fails alone ends the whole job at once (its peers
  // would otherwise wait in the next collective until the timeout).
  int stop(int exit_code, const Status& s);
  int bad(const Status& s) { return stop(2, s); }
  int broken(const Status& s) { return stop(1, s); }

  Exit open_inputs();     // --model, the data, the plan, the sampler, --validation_file
  Exit open_resume();     // --resume_from_checkpoint's manifest
  Exit lock_output();     // rank 0: one job per output directory
  Exit agree();           // every rank runs the same thing
  Exit prepare_output();  // rank 0: metrics, the effective config, tokenizer files, monitors
  void print_banner() const;
  Exit create_engine();  // and restore the checkpoint's state
  Exit train_steps();    // the step loop
  Exit interrupted(int64_t step, int signal);
  Exit load_micro_batches(int64_t step);
  Exit record_step(int64_t step, const StepResult& result, double elapsed, double step_s,
                   const std::optional<EvalResult>& eval);
  Exit log_step(int64_t step, const StepResult& result, std::chrono::steady_clock::time_point now,
                double elapsed);
  Exit save_final();
  Status save(int64_t next_step);
  StatusOr<EvalResult> evaluate(int64_t done_steps);
  void flush_stdout();

  const TrainArgs& args_;
  Communicator& comm_;
  const int rank_, world_;
  const bool lead_;
  ProgressPrinter progress_;
  bool started_ = false;
  // SIGINT / SIGTERM from here on are acted on at the next step boundary (swap files are made
  // while the engine is created, and must go with it).
  InterruptGuard interrupt_guard_;

  DType save_dtype_ = DType::kF32;
  std::unique_ptr<ModelSource> source_;
  const model::ModelConfig* mc_ = nullptr;
  int64_t block_ = 0;
  std::optional<TokenDataset> data_;
  TrainArgs resolved_args_;
  std::optional<Plan> plan_;
  int64_t max_steps_ = 0;
  std::optional<GlobalBatchSampler> sampler_;
  std::optional<TokenDataset> validation_;
  std::unique_ptr<checkpoint::LoadedCheckpoint> resume_;
  int64_t start_step_ = 0;

  MetricsWriter metrics_;
  std::unique_ptr<TrainMonitor> monitor_;  // tensorboard / csv_monitor (rank 0)
  std::optional<StepStats> stats_;         // tokens/s, MFU, memory (rank 0)
  std::unique_ptr<RunLock> run_lock_;
  const std::string metrics_path_;
  int64_t steps_per_print_ = 0, log_every_ = 0;

  std::unique_ptr<Engine> engine_;
  checkpoint::TagValidation tag_validation_ = checkpoint::TagValidation::kWarn;
  std::optional<Evaluator> evaluator_;
  std::vector<MicroBatch> micro_;
  std::chrono::steady_clock::time_point start_, window_start_;
  double window_tokens_ = 0;
  OffloadTimes offload_window_;  // the offload pipeline's times at the last breakdown line
  sharding::ParamTransfers param_window_;  // offload_param's shard copies at the last one
  int64_t last_saved_step_ = 0;
  int64_t nonfinite_steps_ = 0;  // consecutive steps whose loss was NaN / Inf
  bool stdout_closed_ = false;
};

int TrainingRun::stop(int exit_code, const Status& s) {
  progress_.end_live_line();
  if (!started_) return agree_to_start(comm_, exit_code, s.message(), {}, stderr);
  fail({exit_code, s}, rank_, world_);
  if (world_ > 1) comm_.abort_job(exit_code);
  return exit_code;
}

int TrainingRun::run() {
  // Compute threads: this rank's share of the host's cores (OMP_NUM_THREADS wins when set).
  omp_set_num_threads(default_compute_threads(comm_));
  if (Exit e = open_inputs()) return *e;
  if (Exit e = open_resume()) return *e;
  if (Exit e = lock_output()) return *e;
  if (Exit e = agree()) return *e;
  if (Exit e = prepare_output()) return *e;
  print_banner();
  if (Exit e = create_engine()) return *e;
  if (Exit e = train_steps()) return *e;
  if (lead_ && engine_->device() == Device::kCuda) {
    // Sampled after the last step, before the save. The engine allocates its buffers up front and
    // its pools keep theirs, so this is close to the run's peak (the CUDA context included).
    if (StatusOr<CudaMemoryInfo> gpu = cuda_memory_info(); gpu.ok()) {
      std::printf(
          "zero train: GPU memory in use after training: %.0f MiB of %.0f MiB "
          "(cudaMemGetInfo: every process on the GPU, CUDA context included)\n",
          static_cast<double>(gpu->used_bytes) / (1 << 20),
          static_cast<double>(gpu->total_bytes) / (1 << 20));
    }
  }
  if (Exit e = save_final()) return *e;
  if (lead_) {
    const double total =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::printf("zero train: %s in %s; metrics in %s/metrics.jsonl\n",
                steps_summary(start_step_, max_steps_).c_str(), format_duration(total).c_str(),
                args_.output_dir.c_str());
  }
  return 0;
}

Exit TrainingRun::open_inputs() {
  if (args_.output_dir.empty()) return bad(invalid_argument("--output_dir is required"));
  // Save options are checked now, not after hours of training with nothing saved.
  if (args_.save_dtype) {
    auto d = parse_dtype(*args_.save_dtype);
    if (!d || (*d != DType::kF32 && *d != DType::kBF16 && *d != DType::kF16)) {
      return bad(
          invalid_argument("--save_dtype {}: expected fp32, bf16 or fp16", *args_.save_dtype));
    }
    save_dtype_ = *d;
  }
  auto source = ModelSource::open(args_.model, static_cast<uint64_t>(args_.seed));
  if (!source.ok()) return bad(source.status().with_context("--model " + args_.model));
  source_ = std::move(*source);
  mc_ = &source_->config();
  const model::ModelConfig& mc = *mc_;

  block_ =
      args_.block_size > 0 ? args_.block_size : std::min<int64_t>(1024, mc.max_position_embeddings);
  if (mc.arch == model::Arch::kGpt2 && block_ > mc.max_position_embeddings) {
    return bad(invalid_argument("--block_size {} exceeds the model's n_positions {}", block_,
                                mc.max_position_embeddings));
  }
  // Prepared data (tokens + loss mask + manifest) or a token file; never plain text as ids.
  auto data = open_train_data(
      *default_storage(), {args_.train_file, args_.data_dtype, args_.model, block_, mc.vocab_size});
  if (!data.ok()) return bad(data.status());
  data_ = std::move(*data);

  // The plan counts the steps (--max_steps, or epochs over the samples).
  resolved_args_ = args_;
  auto plan_or = make_plan(resolved_args_, mc, world_, data_->num_samples());
  if (!plan_or.ok()) return bad(plan_or.status());
  plan_ = std::move(*plan_or);
  Plan& plan = *plan_;
  // Before the banner: `--device cuda` without a usable GPU is the first thing the user reads.
  if (Status s = check_device_usable(plan.engine.device); !s.ok()) return bad(s);
  // Activations are sized by the larger of the training and the evaluation micro-batch.
  plan.engine.planned_micro_batch =
      args_.validation_file ? std::max(plan.micro_batch, args_.per_device_eval_batch_size)
                            : plan.micro_batch;
  plan.engine.planned_seq_len = block_;
  plan.engine.wall_clock_breakdown = plan.ds.wall_clock_breakdown.value;
  plan.engine.mean_over_global_targets = data_->has_mask();  // HF's loss over unmasked targets
  record_batch_triad(plan.effective, plan.train_batch, plan.micro_batch, plan.grad_accum);
  plan.engine.planned_grad_accum = plan.grad_accum;  // sizes the step's token batches
  max_steps_ = plan.max_steps;

  BatchSamplerConfig sc;
  sc.num_samples = data_->num_samples();
  sc.train_batch_size = plan.train_batch;
  sc.micro_batch_size = plan.micro_batch;
  sc.world_size = world_;
  sc.seed = static_cast<uint64_t>(args_.seed);
  if (args_.data_order == "shuffle") {
    sc.order = DataOrder::kShuffle;
  } else if (args_.data_order != "sequential") {
    return bad(
        invalid_argument("--data_order {}: expected sequential or shuffle", args_.data_order));
  }
  auto sampler = GlobalBatchSampler::create(sc);
  if (!sampler.ok()) return bad(sampler.status());
  sampler_ = std::move(*sampler);

  // --validation_file: opened as the train file is (prepared data with its mask and tokenizer
  // check, or a token file; never text as ids).
  if (args_.validation_file) {
    auto v =
        open_train_data(*default_storage(), {*args_.validation_file, args_.data_dtype, args_.model,
                                             block_, mc.vocab_size, "--validation_file"});
    if (!v.ok()) return bad(v.status().with_context("--validation_file"));
    validation_ = std::move(*v);
  } else if (args_.eval_steps > 0 || args_.eval_on_start) {
    return bad(invalid_argument("--eval_steps / --eval_on_start need --validation_file"));
  }
  return std::nullopt;
}

// Resume: the checkpoint's manifest says where the run stands (every rank opens it).
Exit TrainingRun::open_resume() {
  if (!args_.resume_from_checkpoint) return std::nullopt;
  std::string path = *args_.resume_from_checkpoint;
  auto ds = checkpoint::find_deepspeed_checkpoint(*default_storage(), path);
  if (ds.ok() && ds->found) {
    auto imported = import_deepspeed_for_resume(path, args_.output_dir, *mc_, comm_);
    if (!imported.ok()) return bad(imported.status().with_context("--resume_from_checkpoint"));
    path = *imported;
  }
  auto ck = checkpoint::open_checkpoint(*default_storage(), path);
  if (!ck.ok()) return bad(ck.status().with_context("--resume_from_checkpoint"));
  resume_ = std::move(*ck);
  model::ModelLayout layout(*mc_);
  Status s = resume_->check_compatible(layout);
  if (s.ok()) s = resume_->check_run(run_identity(plan_->engine));
  if (!s.ok()) return bad(s.with_context(path));
  const SamplerState saved = sampler_from_json(resume_->state()["sampler"]);
  // A checkpoint imported from DeepSpeed (`zero ckpt import`) knows its step but not how
  // DeepSpeed's data loader cut this run's data: it continues at that step of this run's order.
  if (!resume_->state().contains("imported_from")) {
    s = sampler_->check_resume(saved);
    if (!s.ok()) return bad(s.with_context(path));
  }
  start_step_ = saved.next_step;
  if (start_step_ >= max_steps_) {
    return bad(
        invalid_argument("--resume_from_checkpoint: the checkpoint is at step {}, and "
                         "--max_steps is {} (it counts the total steps)",
                         start_step_, max_steps_));
  }
  return std::nullopt;
}

// Output directory (rank 0 only writes). One job per output directory: rank 0 holds OUT/.lock
// until it returns.
Exit TrainingRun::lock_output() {
  if (!lead_) return std::nullopt;
  auto lock = RunLock::acquire(args_.output_dir, "zero train");
  if (!lock.ok()) return bad(lock.status());
  run_lock_ = std::move(*lock);
  if (std::filesystem::exists(metrics_path_) && !args_.overwrite_output_dir && !resume_) {
    return bad(failed_precondition(
        "{} already holds a run (metrics.jsonl); pass --overwrite_output_dir to replace it or "
        "--resume_from_checkpoint to continue it",
        args_.output_dir));
  }
  return std::nullopt;
}

// Every rank is ready: check that they run the same thing before anything is written or any
// collective of the engine is issued.
Exit TrainingRun::agree() {
  const int code = agree_to_start(
      comm_, 0, "",
      run_fingerprint(args_, *plan_, *mc_, block_, data_->num_samples(), max_steps_, start_step_),
      stderr);
  if (code != 0) return code;
  started_ = true;
  return std::nullopt;
}

Exit TrainingRun::prepare_output() {
  const Plan& plan = *plan_;
  steps_per_print_ =
      plan.ds.steps_per_print.value.value_or(args_.logging_steps > 0 ? args_.logging_steps : 10);
  log_every_ = args_.logging_steps > 0 ? args_.logging_steps : steps_per_print_;
  if (!lead_) return std::nullopt;
  Storage& storage = *default_storage();
  Status s = storage.make_dirs(args_.output_dir);
  if (!s.ok()) return bad(s);
  if (resume_) {
    auto kept = truncate_metrics(metrics_path_, start_step_);
    if (!kept.ok()) return bad(kept.status());
    if (kept->steps_missing > 0) {
      std::fprintf(stderr,
                   "warning: %s has no line for %lld of the steps 1..%lld (first: step %lld); "
                   "the resumed run appends from step %lld\n",
                   metrics_path_.c_str(), static_cast<long long>(kept->steps_missing),
                   static_cast<long long>(start_step_), static_cast<long long>(kept->first_missing),
                   static_cast<long long>(start_step_ + 1));
    }
  } else if (args_.overwrite_output_dir) {
    // A fresh run replaces the old one: its checkpoints go too, so no checkpoint of the old run
    // is left under a tag the new run never reaches (and `latest` cannot name one).
    s = remove_checkpoints(args_.output_dir);
    if (!s.ok()) return bad(s);
  }
  s = metrics_.open(metrics_path_, /*truncate=*/!resume_);
  if (!s.ok()) return bad(s);
  s = write_effective_config(storage, args_.output_dir, plan.effective);
  if (!s.ok()) return bad(s);
  // The model's tokenizer files, kept with the run for `zero ckpt to-fp32` (tokenizer_files.h);
  // a fresh run first drops an earlier run's (its --model may have had another tokenizer).
  if (!resume_) s = storage.remove_dir(checkpoint::run_tokenizer_dir(args_.output_dir));
  if (!s.ok()) return bad(s);
  s = checkpoint::copy_tokenizer_files(storage, model_dir_of(args_.model),
                                       checkpoint::run_tokenizer_dir(args_.output_dir));
  if (!s.ok()) return bad(s.with_context("copying the tokenizer files of --model"));
  auto monitor = TrainMonitor::open(plan.ds, plan.engine.dtype == DType::kF16);
  if (!monitor.ok()) return bad(monitor.status());
  monitor_ = std::move(*monitor);
  const bool cuda = plan.engine.device == Device::kCuda;
  stats_.emplace(StepStatsOptions{
      .flops_per_token = train_flops_per_token(*mc_, block_),
      .peak_flops_per_gpu =
          cuda ? peak_dense_flops(probe_cuda().name, plan.engine.dtype) : std::nullopt,
      .world_size = world_,
      .cuda = cuda});
  return std::nullopt;
}

void TrainingRun::print_banner() const {
  if (!lead_) return;
  const Plan& plan = *plan_;
  for (const auto& n : args_.cli_notes) std::fprintf(stderr, "note: %s\n", n.c_str());
  for (const auto& n : plan.notes) std::fprintf(stderr, "%s\n", n.c_str());
  std::printf("zero train: %s, %s params, world size %d, ZeRO stage %d, %s\n",
              model_banner(source_->description(), resume_.get()).c_str(),
              fmt::format("{:.2f}M", static_cast<double>(count_params(*mc_).total) / 1e6).c_str(),
              world_, plan.engine.zero.stage, std::string(dtype_name(plan.engine.dtype)).c_str());
  std::printf(
      "zero train: data %s: %lld tokens, %lld samples of %lld; batch %lld = micro %lld x "
      "accumulation %lld x world %d; %lld steps\n",
      args_.train_file.c_str(), static_cast<long long>(data_->num_tokens()),
      static_cast<long long>(data_->num_samples()), static_cast<long long>(block_),
      static_cast<long long>(plan.train_batch), static_cast<long long>(plan.micro_batch),
      static_cast<long long>(plan.grad_accum), world_, static_cast<long long>(max_steps_));
  if (plan.engine.device == Device::kCuda) {
    std::printf("zero train: device: %s (one per rank)\n", probe_cuda().description.c_str());
  }
  for (const auto& n : plan.info) std::printf("zero train: %s\n", n.c_str());
  std::printf("zero train: config: %s; in %s/%s%s\n",
              effective_config_summary(plan.effective, world_, &plan.engine.offload).c_str(),
              args_.output_dir.c_str(), kEffectiveConfigFile,
              args_.verbose ? "" : " (--verbose prints it)");
  if (args_.verbose) {
    std::printf("zero train: effective DeepSpeed config:\n%s\n",
                config::render_effective_config(plan.effective).c_str());
  }
  if (resume_) {
    for (const std::string& n : schedule_change_notes(*resume_, plan.effective.json, max_steps_)) {
      std::printf("zero train: note: %s\n", n.c_str());
    }
  }
  std::fflush(stdout);
}

Exit TrainingRun::create_engine() {
  const Plan& plan = *plan_;
  EngineOptions engine_options = plan.engine;
  if (lead_) {
    engine_options.on_memory_plan = [](const std::string& line) {
      std::printf("zero train: memory plan: %s\n", line.c_str());
      std::fflush(stdout);
    };
  }
  const Device device = engine_options.device;
  auto engine_or = Engine::create(std::move(engine_options), source_->init_fn(device), &comm_);
  if (!engine_or.ok()) return bad(engine_or.status());
  engine_ = std::move(*engine_or);
  if (lead_ && args_.offload_overlap && !engine_->offload_on_device()) {
    std::printf(
        "zero train: note: --offload_overlap has no effect here (it needs --device cuda and "
        "zero_optimization.offload_optimizer.device cpu)\n");
  }
  if (lead_) {
    // One line from the engine's own decisions (Engine::placement), so nothing printed disagrees.
    std::printf("zero train: placement: %s", engine_->placement().line().c_str());
    if (engine_->device() != Device::kCpu) {
      std::printf(" (%.1f MiB of GPU memory for ZeRO state)",
                  static_cast<double>(engine_->memory().device_bytes) / (1024.0 * 1024.0));
    }
    std::printf("\n");
    if (engine_->offload_on_device() && args_.offload_overlap && !engine_->offload_overlaps()) {
      std::printf(
          "zero train: note: --offload_overlap acts only without gradient_clipping and fp16; the "
          "CPU Adam runs after backward\n");
    }
  }
  if (resume_) {
    Engine::RestoreState st;
    const nlohmann::json& state = resume_->state();
    st.global_step = state.value("global_step", int64_t{0});
    st.optimizer_updates = state.value("optimizer_updates", int64_t{0});
    st.schedule_state = state.value("schedule", nlohmann::json());
    st.loss_scaler_state = state.value("loss_scaler", nlohmann::json());
    const checkpoint::LoadedCheckpoint* ck = resume_.get();
    st.read_partition = [ck](int u, int64_t b, int64_t e, float* m, float* v1, float* v2) {
      return ck->read_partition(u, b, e, m, v1, v2);
    };
    Status s = engine_->restore(st);
    if (!s.ok()) return bad(s.with_context(*args_.resume_from_checkpoint));
    if (lead_) {
      std::printf("zero train: resumed from %s (step %lld, saved at world size %d, stage %d)\n",
                  resume_->tag_dir().c_str(), static_cast<long long>(start_step_),
                  resume_->world_size(), resume_->stage());
    }
    resume_.reset();
  }
  auto tag_validation = checkpoint::parse_tag_validation(
      plan.effective.json["checkpoint"].value("tag_validation", std::string("Warn")));
  if (!tag_validation.ok()) return bad(tag_validation.status());
  tag_validation_ = *tag_validation;
  return std::nullopt;
}

Status TrainingRun::save(int64_t next_step) {
  const Plan& plan = *plan_;
  ZERO_ASSIGN_OR_RETURN(checkpoint::SaveRequest r, engine_save_request(*engine_));
  r.out_dir = args_.output_dir;
  r.state["sampler"] = sampler_json(sampler_->state(next_step));
  r.state["rng"] = {{"seed", args_.seed}};
  r.state["max_steps"] = max_steps_;
  r.effective_config = plan.effective.json;
  r.save_total_limit = static_cast<int>(args_.save_total_limit.value_or(0));
  r.tag_validation = tag_validation_;
  r.node_local_storage = plan.ds.checkpoint.use_node_local_storage.value;
  // The metrics lines of steps 1..N reach the disk before checkpoint N is published, so a crash
  // at any moment never leaves a published step without its lines (issue 13 item 6).
  // (A failed sync is a warning: rank 0 alone leaving before the collective save would leave
  // the others waiting in it.)
  if (lead_) {
    Status synced = metrics_.sync();
    progress_.end_live_line();
    if (!synced.ok()) std::fprintf(stderr, "warning: %s\n", synced.to_string().c_str());
  }
  ZERO_ASSIGN_OR_RETURN(checkpoint::SaveResult res,
                        checkpoint::save_checkpoint(*default_storage(), comm_, r));
  if (lead_) {
    progress_.message(
        fmt::format("zero train: saved checkpoint {}{}", res.tag_dir,
                    res.replaced ? " (replaced an earlier run's checkpoint of that tag)" : ""));
  }
  return ok_status();
}

// Progress goes to stdout; `zero train ... | head` closes it early. SIGPIPE is ignored (see
// InterruptGuard) and the run goes on without progress lines, saying so once on stderr.
void TrainingRun::flush_stdout() {
  // ferror is sticky: a failed write by the progress printer counts too.
  if ((std::fflush(stdout) != 0 || std::ferror(stdout) != 0) && !stdout_closed_) {
    stdout_closed_ = true;
    std::fprintf(stderr,
                 "zero train: warning: stdout is closed (%s); training goes on, progress lines "
                 "are no longer printed (metrics.jsonl has every step)\n",
                 errno != 0 ? std::strerror(errno) : "write failed");
    // Later writes go nowhere instead of failing (fmt::print throws on a failed write).
    if (std::freopen("/dev/null", "w", stdout) == nullptr) std::clearerr(stdout);
  }
}

// Evaluation (collective: every rank runs it at the same steps); rank 0 prints it and writes it
// to the CSV monitor.
StatusOr<EvalResult> TrainingRun::evaluate(int64_t done_steps) {
  ZERO_ASSIGN_OR_RETURN(EvalResult r, evaluator_->run(*engine_));
  if (lead_) {
    progress_.message(fmt::format("eval after step {}/{} | eval_loss {:.4f} | eval_ppl {:.4g}",
                                  done_steps, max_steps_, r.loss, r.perplexity));
    if (monitor_) {
      ZERO_RETURN_IF_ERROR(monitor_->write_eval(done_steps * plan_->train_batch, r.loss));
    }
  }
  return r;
}

Exit TrainingRun::train_steps() {
  start_ = std::chrono::steady_clock::now();
  window_start_ = start_;
  micro_.resize(static_cast<size_t>(plan_->grad_accum));
  last_saved_step_ = start_step_;
  if (validation_) {
    evaluator_.emplace(&*validation_, args_.per_device_eval_batch_size, world_, rank_);
  }
  if (evaluator_ && args_.eval_on_start) {
    auto r = evaluate(start_step_);
    if (!r.ok()) return broken(r.status().with_context("evaluating (--eval_on_start)"));
    // A step-0 line only for a fresh run: a resumed run's step start_step has its line already.
    if (lead_ && start_step_ == 0) {
      Status s = metrics_.write_line(eval_on_start_json_line(r->loss, r->perplexity));
      if (!s.ok()) return broken(s);
    }
  }
  for (int64_t step = start_step_; step < max_steps_; ++step) {
    // Step boundary: did any rank get SIGINT / SIGTERM? (one tiny all-gather: all ranks must
    // stop after the same step, or the others would wait in the next step's collectives.)
    auto sig = agree_on_interrupt(comm_);
    if (!sig.ok()) return broken(sig.status());
    if (*sig != 0) return interrupted(step, *sig);
    const auto step_start = std::chrono::steady_clock::now();
    if (Exit e = load_micro_batches(step)) return e;
    auto result = engine_->train_step(micro_);
    if (!result.ok()) return broken(result.status());
    nonfinite_steps_ = std::isfinite(result->loss) ? 0 : nonfinite_steps_ + 1;
    const auto now = std::chrono::steady_clock::now();
    const double step_s = std::chrono::duration<double>(now - step_start).count();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    window_tokens_ += static_cast<double>(result->tokens);
    std::optional<EvalResult> eval;
    if (evaluator_ &&
        ((args_.eval_steps > 0 && (step + 1) % args_.eval_steps == 0) || step + 1 == max_steps_)) {
      auto r = evaluate(step + 1);
      if (!r.ok()) return broken(r.status().with_context("evaluating"));
      eval = *r;
    }
    if (Exit e = record_step(step, *result, elapsed, step_s, eval)) return e;
    if (args_.save_steps > 0 && (step + 1) % args_.save_steps == 0) {
      Status s = save(step + 1);
      if (!s.ok()) return broken(s.with_context("saving a checkpoint"));
      last_saved_step_ = step + 1;
    }
    if (Exit e = log_step(step, *result, now, elapsed)) return e;
  }
  return std::nullopt;
}

Exit TrainingRun::interrupted(int64_t step, int signal) {
  if (lead_) {
    progress_.end_live_line();
    std::fprintf(stderr, "zero train: %s received: stopping after step %lld of %lld\n",
                 interrupt_name(signal), static_cast<long long>(step),
                 static_cast<long long>(max_steps_));
  }
  if (args_.save_on_interrupt && step > last_saved_step_) {
    Status s = save(step);
    if (!s.ok()) {
      return broken(
          s.with_context("saving a checkpoint on " + std::string(interrupt_name(signal))));
    }
  }
  // Returning destroys the engine: its NVMe swap files are removed.
  return 128 + signal;
}

Exit TrainingRun::load_micro_batches(int64_t step) {
  const Plan& plan = *plan_;
  for (int64_t m = 0; m < plan.grad_accum; ++m) {
    MicroBatch& mb = micro_[static_cast<size_t>(m)];
    mb.batch = plan.micro_batch;
    mb.seq = block_;
    mb.tokens.resize(static_cast<size_t>(plan.micro_batch * block_));
    mb.targets.resize(mb.tokens.size());
    std::vector<int64_t> samples = sampler_->micro_batch(step, m, rank_);
    for (size_t i = 0; i < samples.size(); ++i) {
      Status s = data_->get_sample(samples[i], mb.tokens.data() + i * block_,
                                   mb.targets.data() + i * block_);
      if (!s.ok()) return bad(s);
    }
  }
  return std::nullopt;
}

// The step's metrics line and monitor scalars (rank 0; before its checkpoint, see save()) and the
// non-finite stop.
Exit TrainingRun::record_step(int64_t step, const StepResult& result, double elapsed, double step_s,
                              const std::optional<EvalResult>& eval) {
  if (lead_) {
    StepMetrics sm;
    sm.step = step + 1;
    sm.loss = result.loss;
    sm.lr = result.lr;
    sm.grad_norm = result.grad_norm;
    sm.loss_scale = result.loss_scale;
    sm.skipped = result.skipped;
    sm.tokens = result.tokens;
    sm.elapsed_s = elapsed;
    if (eval) {
      sm.eval_loss = eval->loss;
      sm.eval_ppl = eval->perplexity;
    }
    stats_->fill(sm, step_s);
    Status s = metrics_.write(sm);
    if (s.ok() && monitor_) s = monitor_->write_step((step + 1) * plan_->train_batch, sm);
    if (!s.ok()) return broken(s);
  }
  if (args_.max_nonfinite_steps > 0 && nonfinite_steps_ >= args_.max_nonfinite_steps) {
    // The loss is the global batch's mean, the same on every rank: all ranks stop here.
    if (lead_) {
      std::fprintf(stderr,
                   "error: the loss was %g (not finite) in the last %lld steps (%lld..%lld); "
                   "stopping (--max_nonfinite_steps %lld). The weights (--model), the learning "
                   "rate or the data are broken: fp16 overflow does not cause this (its steps "
                   "are skipped with a finite loss)\n",
                   result.loss, static_cast<long long>(nonfinite_steps_),
                   static_cast<long long>(step + 2 - nonfinite_steps_),
                   static_cast<long long>(step + 1),
                   static_cast<long long>(args_.max_nonfinite_steps));
    }
    return 1;
  }
  return std::nullopt;
}

// Rank 0: DeepSpeed's periodic line and the progress line.
Exit TrainingRun::log_step(int64_t step, const StepResult& result,
                           std::chrono::steady_clock::time_point now, double elapsed) {
  if (!lead_) return std::nullopt;
  const Plan& plan = *plan_;
  if ((step + 1) % steps_per_print_ == 0 && plan.ds.steps_per_print.value) {
    // DeepSpeed's periodic line (engine._report_progress).
    progress_.message(fmt::format("[Rank 0] step={}, skipped={}, lr=[{:g}], mom=[({:g}, {:g})]",
                                  step + 1, result.skipped ? "True" : "False", result.lr,
                                  plan.engine.optimizer.beta1, plan.engine.optimizer.beta2));
  }
  const bool live = progress_.mode() == ProgressMode::kLiveLine;
  const bool last = step + 1 == max_steps_;
  if ((step + 1) % log_every_ == 0 || last || live) {
    const double window_s = std::chrono::duration<double>(now - window_start_).count();
    const double tok_s = window_s > 0 ? window_tokens_ / window_s : 0.0;
    // Rates over the steps this run did (a resumed run did not do steps 1..start_step).
    const double eta = elapsed / static_cast<double>(step + 1 - start_step_) *
                       static_cast<double>(max_steps_ - step - 1);
    std::string line = fmt::format(
        "step {}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f}{} | {:.0f} tok/s{} | ETA {}",
        step + 1, max_steps_, result.loss, result.lr, result.grad_norm,
        result.skipped ? " | skipped" : "", tok_s, stats_->progress_fields(tok_s),
        format_duration(eta));
    const bool persist = (step + 1) % log_every_ == 0 || last;
    progress_.progress(line, persist);
    // DeepSpeed's wall_clock_breakdown line: rank 0's own phase times (no collective).
    if (persist && engine_->timers().enabled()) {
      const int64_t window_steps = engine_->timers().steps();
      progress_.message("[Rank 0] " + engine_->timers().log_line_and_reset());
      if (std::optional<OffloadTimes> t = engine_->offload_times()) {
        progress_.message("[Rank 0] " + offload_log_line(*t, offload_window_, window_steps));
        offload_window_ = *t;
      }
      if (std::optional<sharding::ParamTransfers> t = engine_->param_transfers()) {
        progress_.message("[Rank 0] " + param_offload_log_line(*t, param_window_, window_steps));
        param_window_ = *t;
      }
    }
    flush_stdout();
    if (persist) {
      window_tokens_ = 0;
      window_start_ = now;
    }
  }
  return std::nullopt;
}

Exit TrainingRun::save_final() {
  if (!args_.save_final) return std::nullopt;
  // Gathered unit by unit (peak memory one unit); rank 0 writes.
  const std::string dir = args_.output_dir + "/final";
  auto parts = checkpoint_partitions(*engine_);
  if (!parts.ok()) return broken(parts.status());
  Status s = checkpoint::save_model_weights(*default_storage(), comm_, dir, engine_->layout(),
                                            engine_->shard_layout(), *parts, save_dtype_);
  if (!s.ok()) return broken(s.with_context("saving the final model"));
  if (lead_) {
    s = checkpoint::copy_tokenizer_files(*default_storage(), model_dir_of(args_.model), dir);
    if (!s.ok()) return broken(s.with_context("copying the tokenizer files next to the model"));
    std::printf("zero train: saved the model to %s (HF safetensors, %s)\n", dir.c_str(),
                std::string(dtype_name(save_dtype_)).c_str());
  }
  return std::nullopt;
}

}  // namespace

int run_training(const TrainArgs& args, Communicator& comm) {
  TrainingRun run(args, comm);
  return run.run();
}

}  // namespace zero::runtime
