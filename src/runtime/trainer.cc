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

#include <fmt/format.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/tokenizer_files.h"
#include "config/ds_config.h"
#include "config/effective.h"
#include "config/loader.h"
#include "config/validate.h"
#include "core/storage.h"
#include "data/batch_sampler.h"
#include "data/token_dataset.h"
#include "model/hf_checkpoint.h"
#include "optim/loss_scaler.h"
#include "runtime/csv_monitor.h"
#include "runtime/effective_config_file.h"
#include "runtime/engine_checkpoint.h"
#include "runtime/evaluation.h"
#include "runtime/interrupt.h"
#include "runtime/metrics.h"
#include "runtime/model_source.h"
#include "runtime/progress.h"
#include "runtime/resume_notes.h"
#include "runtime/run_lock.h"
#include "runtime/run_plan.h"
#include "runtime/start_agreement.h"
#include "runtime/train_data.h"
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

// What every rank must agree on: the effective DeepSpeed config, the model and the run plan.
RunFingerprint run_fingerprint(const TrainArgs& args, const Plan& plan,
                               const model::ModelConfig& mc, int64_t block, int64_t num_samples,
                               int64_t max_steps, int64_t start_step) {
  RunFingerprint fp;
  add_to_fingerprint(fp, "ds_config", plan.effective.json);
  add_to_fingerprint(fp, "model", model::model_config_to_json(mc));
  add_to_fingerprint(fp, "--model", args.model);
  add_to_fingerprint(fp, "--train_file", args.train_file);
  add_to_fingerprint(fp, "--validation_file", args.validation_file.value_or(""));
  add_to_fingerprint(fp, "--eval_steps", args.eval_steps);
  add_to_fingerprint(fp, "--per_device_eval_batch_size", args.per_device_eval_batch_size);
  add_to_fingerprint(fp, "--eval_on_start", args.eval_on_start);
  add_to_fingerprint(fp, "data.samples", num_samples);
  add_to_fingerprint(fp, "--block_size", block);
  add_to_fingerprint(fp, "--data_order", args.data_order);
  add_to_fingerprint(fp, "--seed", args.seed);
  add_to_fingerprint(fp, "--max_steps", max_steps);
  // An HF schedule (no scheduler block) is not in the DeepSpeed config: its type and inputs.
  const optim::LrSchedule& schedule = plan.engine.schedule;
  add_to_fingerprint(fp, "lr_schedule.type", std::string(schedule.type_name()));
  if (schedule.params().kind == optim::LrScheduleKind::kHuggingFace) {
    add_to_fingerprint(fp, "lr_schedule.warmup_steps", schedule.params().hf.num_warmup_steps);
    add_to_fingerprint(fp, "--lr_scheduler_kwargs", args.lr_scheduler_kwargs.value_or(""));
  }
  add_to_fingerprint(fp, "resume.step", start_step);
  add_to_fingerprint(fp, "--save_steps", args.save_steps);
  add_to_fingerprint(fp, "--save_total_limit", args.save_total_limit.value_or(0));
  add_to_fingerprint(fp, "--save_final", args.save_final);
  add_to_fingerprint(fp, "--save_dtype", args.save_dtype.value_or("fp32"));
  add_to_fingerprint(fp, "--save_on_interrupt", args.save_on_interrupt);
  add_to_fingerprint(fp, "--gradient_checkpointing", args.gradient_checkpointing);
  add_to_fingerprint(fp, "--output_dir", args.output_dir);
  add_to_fingerprint(fp, "--device", args.device);
  return fp;
}

int fail(const Failure& f, int rank, int world) {
  // One whole line (one write), "[rank R] error: ..." when there are several ranks.
  std::fprintf(stderr, "%s\n", rank_error_line(rank, world, f.status.message()).c_str());
  return f.exit_code;
}

}  // namespace

int run_training(const TrainArgs& args, Communicator& comm) {
  const int rank = comm.rank(), world = comm.world_size();
  const bool lead = rank == 0;
  // Rank 0's stdout: a live line only on a terminal this process owns (never under a launcher).
  ProgressPrinter progress(
      lead ? choose_progress_mode(console_facts_of_this_process(world, args.quiet))
           : ProgressMode::kPlainLines,
      stdout);
  // Until the ranks agreed to start (below), a failure is reported through the agreement, which
  // stops every rank with it; after that, a rank that fails alone ends the whole job at once
  // (its peers would otherwise wait in the next collective until the timeout).
  bool started = false;
  auto stop = [&](int exit_code, const Status& s) -> int {
    progress.end_live_line();
    if (!started) return agree_to_start(comm, exit_code, s.message(), {}, stderr);
    fail({exit_code, s}, rank, world);
    if (world > 1) comm.abort_job(exit_code);
    return exit_code;
  };
  auto bad = [&](const Status& s) { return stop(2, s); };
  auto broken = [&](const Status& s) { return stop(1, s); };

  // SIGINT / SIGTERM from here on are acted on at the next step boundary (swap files are made
  // while the engine is created, and must go with it).
  InterruptGuard interrupt_guard;

  // Compute threads: this rank's share of the host's cores (OMP_NUM_THREADS wins when set).
  omp_set_num_threads(default_compute_threads(comm));

  if (args.device != "cpu") {
    return bad(
        unimplemented("--device {}: this build trains on the CPU only (the CUDA backend "
                      "is not available yet)",
                      args.device));
  }
  if (args.output_dir.empty()) return bad(invalid_argument("--output_dir is required"));
  // Save options are checked now, not after hours of training with nothing saved.
  DType save_dtype = DType::kF32;
  if (args.save_dtype) {
    auto d = parse_dtype(*args.save_dtype);
    if (!d || (*d != DType::kF32 && *d != DType::kBF16 && *d != DType::kF16)) {
      return bad(
          invalid_argument("--save_dtype {}: expected fp32, bf16 or fp16", *args.save_dtype));
    }
    save_dtype = *d;
  }
  auto source = ModelSource::open(args.model, static_cast<uint64_t>(args.seed));
  if (!source.ok()) return bad(source.status().with_context("--model " + args.model));
  const model::ModelConfig& mc = (*source)->config();

  const int64_t block =
      args.block_size > 0 ? args.block_size : std::min<int64_t>(1024, mc.max_position_embeddings);
  if (mc.arch == model::Arch::kGpt2 && block > mc.max_position_embeddings) {
    return bad(invalid_argument("--block_size {} exceeds the model's n_positions {}", block,
                                mc.max_position_embeddings));
  }
  // Prepared data (tokens + loss mask + manifest) or a token file; never plain text as ids.
  auto data = open_train_data(*default_storage(),
                              {args.train_file, args.data_dtype, args.model, block, mc.vocab_size});
  if (!data.ok()) return bad(data.status());

  // The plan counts the steps (--max_steps, or epochs over the samples).
  TrainArgs resolved_args = args;
  auto plan_or = make_plan(resolved_args, mc, world, data->num_samples());
  if (!plan_or.ok()) return bad(plan_or.status());
  Plan& plan = *plan_or;
  // Activations are sized by the larger of the training and the evaluation micro-batch.
  plan.engine.planned_micro_batch =
      args.validation_file ? std::max(plan.micro_batch, args.per_device_eval_batch_size)
                           : plan.micro_batch;
  plan.engine.planned_seq_len = block;
  plan.engine.wall_clock_breakdown = plan.ds.wall_clock_breakdown.value;
  plan.engine.mean_over_global_targets = data->has_mask();  // HF's loss over unmasked targets
  record_batch_triad(plan.effective, plan.train_batch, plan.micro_batch, plan.grad_accum);
  plan.engine.planned_grad_accum = plan.grad_accum;  // sizes the step's token batches
  const int64_t max_steps = plan.max_steps;

  BatchSamplerConfig sc;
  sc.num_samples = data->num_samples();
  sc.train_batch_size = plan.train_batch;
  sc.micro_batch_size = plan.micro_batch;
  sc.world_size = world;
  sc.seed = static_cast<uint64_t>(args.seed);
  if (args.data_order == "shuffle") {
    sc.order = DataOrder::kShuffle;
  } else if (args.data_order != "sequential") {
    return bad(
        invalid_argument("--data_order {}: expected sequential or shuffle", args.data_order));
  }
  auto sampler = GlobalBatchSampler::create(sc);
  if (!sampler.ok()) return bad(sampler.status());

  // --validation_file: opened as the train file is (prepared data with its mask and tokenizer
  // check, or a token file; never text as ids).
  std::optional<TokenDataset> validation;
  if (args.validation_file) {
    auto v =
        open_train_data(*default_storage(), {*args.validation_file, args.data_dtype, args.model,
                                             block, mc.vocab_size, "--validation_file"});
    if (!v.ok()) return bad(v.status().with_context("--validation_file"));
    validation = std::move(*v);
  } else if (args.eval_steps > 0 || args.eval_on_start) {
    return bad(invalid_argument("--eval_steps / --eval_on_start need --validation_file"));
  }

  // Resume: the checkpoint's manifest says where the run stands (every rank opens it).
  std::unique_ptr<checkpoint::LoadedCheckpoint> resume;
  int64_t start_step = 0;
  if (args.resume_from_checkpoint) {
    auto ck = checkpoint::open_checkpoint(*default_storage(), *args.resume_from_checkpoint);
    if (!ck.ok()) return bad(ck.status().with_context("--resume_from_checkpoint"));
    resume = std::move(*ck);
    model::ModelLayout layout(mc);
    Status s = resume->check_compatible(layout);
    if (s.ok()) s = resume->check_run(run_identity(plan.engine));
    if (!s.ok()) return bad(s.with_context(*args.resume_from_checkpoint));
    const SamplerState saved = sampler_from_json(resume->state()["sampler"]);
    s = sampler->check_resume(saved);
    if (!s.ok()) return bad(s.with_context(*args.resume_from_checkpoint));
    start_step = saved.next_step;
    if (start_step >= max_steps) {
      return bad(
          invalid_argument("--resume_from_checkpoint: the checkpoint is at step {}, and "
                           "--max_steps is {} (it counts the total steps)",
                           start_step, max_steps));
    }
  }

  // Output directory and monitors (rank 0 only writes). One job per output directory: rank 0
  // holds OUT/.lock until it returns.
  MetricsWriter metrics;
  std::unique_ptr<CsvMonitor> csv;
  std::unique_ptr<RunLock> run_lock;
  const std::string metrics_path = args.output_dir + "/metrics.jsonl";
  if (lead) {
    auto lock = RunLock::acquire(args.output_dir, "zero train");
    if (!lock.ok()) return bad(lock.status());
    run_lock = std::move(*lock);
    if (std::filesystem::exists(metrics_path) && !args.overwrite_output_dir && !resume) {
      return bad(failed_precondition(
          "{} already holds a run (metrics.jsonl); pass --overwrite_output_dir to replace it or "
          "--resume_from_checkpoint to continue it",
          args.output_dir));
    }
  }

  // Every rank is ready: check that they run the same thing before anything is written or any
  // collective of the engine is issued.
  {
    const int code = agree_to_start(
        comm, 0, "",
        run_fingerprint(args, plan, mc, block, data->num_samples(), max_steps, start_step), stderr);
    if (code != 0) return code;
    started = true;
  }

  if (lead) {
    Status s = default_storage()->make_dirs(args.output_dir);
    if (!s.ok()) return bad(s);
    if (resume) {
      auto kept = truncate_metrics(metrics_path, start_step);
      if (!kept.ok()) return bad(kept.status());
      if (kept->steps_missing > 0) {
        std::fprintf(stderr,
                     "warning: %s has no line for %lld of the steps 1..%lld (first: step %lld); "
                     "the resumed run appends from step %lld\n",
                     metrics_path.c_str(), static_cast<long long>(kept->steps_missing),
                     static_cast<long long>(start_step),
                     static_cast<long long>(kept->first_missing),
                     static_cast<long long>(start_step + 1));
      }
    } else if (args.overwrite_output_dir) {
      // A fresh run replaces the old one: its checkpoints go too, so no checkpoint of the old run
      // is left under a tag the new run never reaches (and `latest` cannot name one).
      s = remove_checkpoints(args.output_dir);
      if (!s.ok()) return bad(s);
    }
    s = metrics.open(metrics_path, /*truncate=*/!resume);
    if (!s.ok()) return bad(s);
    s = write_effective_config(*default_storage(), args.output_dir, plan.effective);
    if (!s.ok()) return bad(s);
    // The model's tokenizer files, kept with the run for `zero ckpt to-fp32` (tokenizer_files.h);
    // a fresh run first drops an earlier run's (its --model may have had another tokenizer).
    if (!resume) s = default_storage()->remove_dir(checkpoint::run_tokenizer_dir(args.output_dir));
    if (!s.ok()) return bad(s);
    s = checkpoint::copy_tokenizer_files(*default_storage(), model_dir_of(args.model),
                                         checkpoint::run_tokenizer_dir(args.output_dir));
    if (!s.ok()) return bad(s.with_context("copying the tokenizer files of --model"));
    if (plan.ds.csv_monitor.enabled.value) {
      csv = std::make_unique<CsvMonitor>(plan.ds.csv_monitor.output_path.value,
                                         plan.ds.csv_monitor.job_name.value);
    }
  }

  const int64_t steps_per_print =
      plan.ds.steps_per_print.value.value_or(args.logging_steps > 0 ? args.logging_steps : 10);
  const int64_t log_every = args.logging_steps > 0 ? args.logging_steps : steps_per_print;
  if (lead) {
    for (const auto& n : args.cli_notes) std::fprintf(stderr, "note: %s\n", n.c_str());
    for (const auto& n : plan.notes) std::fprintf(stderr, "%s\n", n.c_str());
    std::printf("zero train: %s, %s params, world size %d, ZeRO stage %d, %s\n",
                model_banner((*source)->description(), resume.get()).c_str(),
                fmt::format("{:.2f}M", static_cast<double>(count_params(mc).total) / 1e6).c_str(),
                world, plan.engine.zero.stage, std::string(dtype_name(plan.engine.dtype)).c_str());
    std::printf(
        "zero train: data %s: %lld tokens, %lld samples of %lld; batch %lld = micro %lld x "
        "accumulation %lld x world %d; %lld steps\n",
        args.train_file.c_str(), static_cast<long long>(data->num_tokens()),
        static_cast<long long>(data->num_samples()), static_cast<long long>(block),
        static_cast<long long>(plan.train_batch), static_cast<long long>(plan.micro_batch),
        static_cast<long long>(plan.grad_accum), world, static_cast<long long>(max_steps));
    for (const auto& n : plan.info) std::printf("zero train: %s\n", n.c_str());
    std::printf("zero train: config: %s; in %s/%s%s\n",
                effective_config_summary(plan.effective, world, &plan.engine.offload).c_str(),
                args.output_dir.c_str(), kEffectiveConfigFile,
                args.verbose ? "" : " (--verbose prints it)");
    if (args.verbose) {
      std::printf("zero train: effective DeepSpeed config:\n%s\n",
                  config::render_effective_config(plan.effective).c_str());
    }
    if (resume) {
      for (const std::string& n : schedule_change_notes(*resume, plan.effective.json, max_steps)) {
        std::printf("zero train: note: %s\n", n.c_str());
      }
    }
    std::fflush(stdout);
  }

  EngineOptions engine_options = plan.engine;
  auto engine_or = Engine::create(std::move(engine_options), (*source)->init_fn(), &comm);
  if (!engine_or.ok()) return bad(engine_or.status());
  Engine& engine = **engine_or;
  if (resume) {
    Engine::RestoreState st;
    const nlohmann::json& state = resume->state();
    st.global_step = state.value("global_step", int64_t{0});
    st.optimizer_updates = state.value("optimizer_updates", int64_t{0});
    st.schedule_state = state.value("schedule", nlohmann::json());
    st.loss_scaler_state = state.value("loss_scaler", nlohmann::json());
    const checkpoint::LoadedCheckpoint* ck = resume.get();
    st.read_partition = [ck](int u, int64_t b, int64_t e, float* m, float* v1, float* v2) {
      return ck->read_partition(u, b, e, m, v1, v2);
    };
    Status s = engine.restore(st);
    if (!s.ok()) return bad(s.with_context(*args.resume_from_checkpoint));
    if (lead) {
      std::printf("zero train: resumed from %s (step %lld, saved at world size %d, stage %d)\n",
                  resume->tag_dir().c_str(), static_cast<long long>(start_step),
                  resume->world_size(), resume->stage());
    }
    resume.reset();
  }
  auto tag_validation = checkpoint::parse_tag_validation(
      plan.effective.json["checkpoint"].value("tag_validation", std::string("Warn")));
  if (!tag_validation.ok()) return bad(tag_validation.status());
  auto save = [&](int64_t next_step) -> Status {
    ZERO_ASSIGN_OR_RETURN(checkpoint::SaveRequest r, engine_save_request(engine));
    r.out_dir = args.output_dir;
    r.state["sampler"] = sampler_json(sampler->state(next_step));
    r.state["rng"] = {{"seed", args.seed}};
    r.state["max_steps"] = max_steps;
    r.effective_config = plan.effective.json;
    r.save_total_limit = static_cast<int>(args.save_total_limit.value_or(0));
    r.tag_validation = *tag_validation;
    r.node_local_storage = plan.ds.checkpoint.use_node_local_storage.value;
    // The metrics lines of steps 1..N reach the disk before checkpoint N is published, so a crash
    // at any moment never leaves a published step without its lines (issue 13 item 6).
    // (A failed sync is a warning: rank 0 alone leaving before the collective save would leave
    // the others waiting in it.)
    if (lead) {
      Status synced = metrics.sync();
      progress.end_live_line();
      if (!synced.ok()) std::fprintf(stderr, "warning: %s\n", synced.to_string().c_str());
    }
    ZERO_ASSIGN_OR_RETURN(checkpoint::SaveResult res,
                          checkpoint::save_checkpoint(*default_storage(), comm, r));
    if (lead) {
      progress.message(
          fmt::format("zero train: saved checkpoint {}{}", res.tag_dir,
                      res.replaced ? " (replaced an earlier run's checkpoint of that tag)" : ""));
    }
    return ok_status();
  };

  const bool live = progress.mode() == ProgressMode::kLiveLine;
  const auto start = std::chrono::steady_clock::now();
  double window_tokens = 0;
  auto window_start = start;
  std::vector<MicroBatch> micro(static_cast<size_t>(plan.grad_accum));
  int64_t last_saved_step = start_step;
  int64_t nonfinite_steps = 0;  // consecutive steps whose loss was NaN / Inf
  bool stdout_closed = false;
  // Progress goes to stdout; `zero train ... | head` closes it early. SIGPIPE is ignored (see
  // InterruptGuard) and the run goes on without progress lines, saying so once on stderr.
  auto flush_stdout = [&] {
    // ferror is sticky: a failed write by the progress printer counts too.
    if ((std::fflush(stdout) != 0 || std::ferror(stdout) != 0) && !stdout_closed) {
      stdout_closed = true;
      std::fprintf(stderr,
                   "zero train: warning: stdout is closed (%s); training goes on, progress lines "
                   "are no longer printed (metrics.jsonl has every step)\n",
                   errno != 0 ? std::strerror(errno) : "write failed");
      // Later writes go nowhere instead of failing (fmt::print throws on a failed write).
      if (std::freopen("/dev/null", "w", stdout) == nullptr) std::clearerr(stdout);
    }
  };
  // Evaluation (collective: every rank runs it at the same steps); rank 0 prints it and writes
  // it to the CSV monitor.
  std::optional<Evaluator> evaluator;
  if (validation) {
    evaluator.emplace(&*validation, args.per_device_eval_batch_size, world, rank);
  }
  auto evaluate = [&](int64_t done_steps) -> StatusOr<EvalResult> {
    ZERO_ASSIGN_OR_RETURN(EvalResult r, evaluator->run(engine));
    if (lead) {
      progress.message(fmt::format("eval after step {}/{} | eval_loss {:.4f} | eval_ppl {:.4g}",
                                   done_steps, max_steps, r.loss, r.perplexity));
      if (csv) {
        ZERO_RETURN_IF_ERROR(
            csv->write("Eval/Samples/eval_loss", done_steps * plan.train_batch, r.loss));
      }
    }
    return r;
  };
  if (evaluator && args.eval_on_start) {
    auto r = evaluate(start_step);
    if (!r.ok()) return broken(r.status().with_context("evaluating (--eval_on_start)"));
    // A step-0 line only for a fresh run: a resumed run's step start_step has its line already.
    if (lead && start_step == 0) {
      Status s = metrics.write_line(eval_on_start_json_line(r->loss, r->perplexity));
      if (!s.ok()) return broken(s);
    }
  }
  for (int64_t step = start_step; step < max_steps; ++step) {
    // Step boundary: did any rank get SIGINT / SIGTERM? (one tiny all-gather: all ranks must
    // stop after the same step, or the others would wait in the next step's collectives.)
    auto sig = agree_on_interrupt(comm);
    if (!sig.ok()) return broken(sig.status());
    if (*sig != 0) {
      if (lead) {
        progress.end_live_line();
        std::fprintf(stderr, "zero train: %s received: stopping after step %lld of %lld\n",
                     interrupt_name(*sig), static_cast<long long>(step),
                     static_cast<long long>(max_steps));
      }
      if (args.save_on_interrupt && step > last_saved_step) {
        Status s = save(step);
        if (!s.ok())
          return broken(
              s.with_context("saving a checkpoint on " + std::string(interrupt_name(*sig))));
      }
      // Returning destroys the engine: its NVMe swap files are removed.
      return 128 + *sig;
    }
    for (int64_t m = 0; m < plan.grad_accum; ++m) {
      MicroBatch& mb = micro[static_cast<size_t>(m)];
      mb.batch = plan.micro_batch;
      mb.seq = block;
      mb.tokens.resize(static_cast<size_t>(plan.micro_batch * block));
      mb.targets.resize(mb.tokens.size());
      std::vector<int64_t> samples = sampler->micro_batch(step, m, rank);
      for (size_t i = 0; i < samples.size(); ++i) {
        Status s = data->get_sample(samples[i], mb.tokens.data() + i * block,
                                    mb.targets.data() + i * block);
        if (!s.ok()) return bad(s);
      }
    }
    auto result = engine.train_step(micro);
    if (!result.ok()) return broken(result.status());
    nonfinite_steps = std::isfinite(result->loss) ? 0 : nonfinite_steps + 1;
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - start).count();
    window_tokens += static_cast<double>(result->tokens);
    std::optional<EvalResult> eval;
    if (evaluator &&
        ((args.eval_steps > 0 && (step + 1) % args.eval_steps == 0) || step + 1 == max_steps)) {
      auto r = evaluate(step + 1);
      if (!r.ok()) return broken(r.status().with_context("evaluating"));
      eval = *r;
    }
    // The step's metrics line first, then its checkpoint (see save()).
    if (lead) {
      StepMetrics sm;
      sm.step = step + 1;
      sm.loss = result->loss;
      sm.lr = result->lr;
      sm.grad_norm = result->grad_norm;
      sm.loss_scale = result->loss_scale;
      sm.skipped = result->skipped;
      sm.tokens = result->tokens;
      sm.elapsed_s = elapsed;
      if (eval) {
        sm.eval_loss = eval->loss;
        sm.eval_ppl = eval->perplexity;
      }
      Status s = metrics.write(sm);
      if (!s.ok()) return broken(s);
    }
    if (args.max_nonfinite_steps > 0 && nonfinite_steps >= args.max_nonfinite_steps) {
      // The loss is the global batch's mean, the same on every rank: all ranks stop here.
      if (lead) {
        std::fprintf(stderr,
                     "error: the loss was %g (not finite) in the last %lld steps (%lld..%lld); "
                     "stopping (--max_nonfinite_steps %lld). The weights (--model), the learning "
                     "rate or the data are broken: fp16 overflow does not cause this (its steps "
                     "are skipped with a finite loss)\n",
                     result->loss, static_cast<long long>(nonfinite_steps),
                     static_cast<long long>(step + 2 - nonfinite_steps),
                     static_cast<long long>(step + 1),
                     static_cast<long long>(args.max_nonfinite_steps));
      }
      return 1;
    }
    if (args.save_steps > 0 && (step + 1) % args.save_steps == 0) {
      Status s = save(step + 1);
      if (!s.ok()) return broken(s.with_context("saving a checkpoint"));
      last_saved_step = step + 1;
    }
    if (!lead) continue;

    Status s;
    if (csv) {
      const int64_t samples_seen = (step + 1) * plan.train_batch;
      s = csv->write("Train/Samples/train_loss", samples_seen, result->loss);
      if (s.ok()) s = csv->write("Train/Samples/lr", samples_seen, result->lr);
      if (s.ok() && plan.engine.dtype == DType::kF16) {
        s = csv->write("Train/Samples/loss_scale", samples_seen, result->loss_scale);
      }
      if (!s.ok()) return broken(s);
    }
    if ((step + 1) % steps_per_print == 0 && plan.ds.steps_per_print.value) {
      // DeepSpeed's periodic line (engine._report_progress).
      progress.message(fmt::format("[Rank 0] step={}, skipped={}, lr=[{:g}], mom=[({:g}, {:g})]",
                                   step + 1, result->skipped ? "True" : "False", result->lr,
                                   plan.engine.optimizer.beta1, plan.engine.optimizer.beta2));
    }
    const bool last = step + 1 == max_steps;
    if ((step + 1) % log_every == 0 || last || live) {
      const double window_s = std::chrono::duration<double>(now - window_start).count();
      const double tok_s = window_s > 0 ? window_tokens / window_s : 0.0;
      // Rates over the steps this run did (a resumed run did not do steps 1..start_step).
      const double eta = elapsed / static_cast<double>(step + 1 - start_step) *
                         static_cast<double>(max_steps - step - 1);
      std::string line = fmt::format(
          "step {}/{} | loss {:.4f} | lr {:.3e} | grad norm {:.3f}{} | {:.0f} tok/s | ETA {}",
          step + 1, max_steps, result->loss, result->lr, result->grad_norm,
          result->skipped ? " | skipped" : "", tok_s, format_duration(eta));
      const bool persist = (step + 1) % log_every == 0 || last;
      progress.progress(line, persist);
      // DeepSpeed's wall_clock_breakdown line: rank 0's own phase times (no collective).
      if (persist && engine.timers().enabled()) {
        progress.message("[Rank 0] " + engine.timers().log_line_and_reset());
      }
      flush_stdout();
      if (persist) {
        window_tokens = 0;
        window_start = now;
      }
    }
  }

  if (args.save_final) {
    // Gathered unit by unit (peak memory one unit); rank 0 writes.
    const std::string dir = args.output_dir + "/final";
    auto parts = checkpoint_partitions(engine);
    if (!parts.ok()) return broken(parts.status());
    Status s = checkpoint::save_model_weights(*default_storage(), comm, dir, engine.layout(),
                                              engine.shard_layout(), *parts, save_dtype);
    if (!s.ok()) return broken(s.with_context("saving the final model"));
    if (lead) {
      s = checkpoint::copy_tokenizer_files(*default_storage(), model_dir_of(args.model), dir);
      if (!s.ok()) return broken(s.with_context("copying the tokenizer files next to the model"));
      std::printf("zero train: saved the model to %s (HF safetensors, %s)\n", dir.c_str(),
                  std::string(dtype_name(save_dtype)).c_str());
    }
  }
  if (lead) {
    const double total =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("zero train: %s in %s; metrics in %s/metrics.jsonl\n",
                steps_summary(start_step, max_steps).c_str(), format_duration(total).c_str(),
                args.output_dir.c_str());
  }
  return 0;
}

}  // namespace zero::runtime
