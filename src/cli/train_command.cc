// `zero train`: HF-Trainer-style flags over a DeepSpeed config (docs/design.md §2). Run alone it is
// world size 1; under mpirun / srun / `zero launch` every rank runs it and the world comes from
// MPI.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/world.h"
#include "runtime/train_steps.h"
#include "runtime/trainer.h"

namespace zero::cli {
namespace {

// "--name" plus "--name-with-dashes" (HF accepts both spellings).
std::string flag_names(const std::string& name) {
  std::string dashed = name;
  for (auto& ch : dashed) {
    if (ch == '_') ch = '-';
  }
  return dashed == name ? "--" + name : "--" + name + ",--" + dashed;
}

// An option stored in `target`; std::optional targets stay empty unless the flag is given.
template <typename T>
CLI::Option* add_value(CLI::App* app, const std::string& name, T& target, const std::string& help) {
  return app->add_option(flag_names(name), target, help);
}

CLI::Option* add_bool_flag(CLI::App* app, const std::string& name, bool& target,
                           const std::string& help) {
  return app->add_flag(flag_names(name), target, help);
}

}  // namespace

namespace {

// The model, the data and evaluation.
void add_input_flags(CLI::App* t, runtime::TrainArgs& args) {
  runtime::TrainArgs* a = &args;
  add_value(t, "deepspeed", a->deepspeed, "ds_config.json (or url-safe base64 of its JSON)");
  t->add_option("--model,--model_name_or_path,--model-name-or-path", a->model,
                "HF model directory (config.json + safetensors) or preset:NAME")
      ->required();
  add_value(t, "train_file", a->train_file,
            "PREFIX from `zero data prepare` (tokens + loss mask), or a token stream: raw uint16 "
            "(nanoGPT .bin), llm.c headered file, or text with --data_dtype uint8 (byte-level "
            "models)")
      ->required();
  add_value(t, "validation_file", a->validation_file,
            "validation tokens, same format as --train_file: eval loss and perplexity in "
            "metrics.jsonl and the progress line");
  add_value(t, "eval_steps", a->eval_steps,
            "evaluate every N steps (default: only after the last step)")
      ->check(int_at_least(1));
  add_value(t, "per_device_eval_batch_size", a->per_device_eval_batch_size,
            "validation samples per rank per forward (default 8)")
      ->check(int_at_least(1));
  add_bool_flag(t, "eval_on_start", a->eval_on_start,
                "evaluate the initial model before step 1 (a step-0 line in metrics.jsonl)");
  add_value(t, "data_dtype", a->data_dtype,
            "uint8 (bytes as tokens) | uint16 | uint32 (default: uint16, or the llm.c header's)");
  add_value(t, "data_order", a->data_order, "sequential (default) | shuffle (per epoch, --seed)");
}

// The run: output, length, checkpoints, device, logging.
void add_run_flags(CLI::App* t, runtime::TrainArgs& args) {
  runtime::TrainArgs* a = &args;
  add_value(t, "output_dir", a->output_dir, "where metrics.jsonl, checkpoints and final/ go")
      ->required();
  add_bool_flag(t, "overwrite_output_dir", a->overwrite_output_dir,
                "replace an earlier run's metrics in output_dir");
  add_value(t, "block_size", a->block_size,
            "tokens per sample T (default: the model's context, at most 1024)")
      ->check(int_at_least(1));
  add_value(t, "max_steps", a->max_steps,
            "optimizer steps to run (total, across resumes); -1 (HF's default): from epochs")
      ->check(int_at_least(-1));
  add_value(t, "num_train_epochs", a->num_train_epochs,
            "epochs, when --max_steps is not given (steps counted as the HF Trainer does)")
      ->check(real_at_least(0, /*exclusive=*/true));
  add_value(t, "seed", a->seed, "seed for presets' initialisation and data shuffling (default 42)")
      ->check(int_at_least(0));
  add_value(t, "logging_steps", a->logging_steps,
            "progress line every N steps (default: steps_per_print, else 10)")
      ->check(int_at_least(1));
  add_bool_flag(t, "save_final", a->save_final,
                "write the trained model as HF safetensors to OUTPUT_DIR/final");
  add_value(t, "save_dtype", a->save_dtype,
            "dtype of --save_final weights: fp32 (default) | bf16 | fp16");
  add_bool_flag(t, "gradient_checkpointing", a->gradient_checkpointing,
                "recompute each block in backward instead of storing its activations");
  add_value(
      t, "resume_from_checkpoint", a->resume_from_checkpoint,
      "continue from OUTPUT_DIR (its `latest`) or one tag directory; any world size or stage");
  add_value(t, "save_steps", a->save_steps,
            "save a sharded checkpoint (OUTPUT_DIR/global_step<N>) every N steps")
      ->check(int_at_least(1));
  add_value(t, "save_total_limit", a->save_total_limit,
            "keep at most K checkpoints (older ones pruned after a newer one is published)")
      ->check(int_at_least(1));
  add_value(t, "max_nonfinite_steps", a->max_nonfinite_steps,
            "stop with an error after N consecutive steps whose loss is NaN or infinite "
            "(default 10; 0: never)")
      ->check(int_at_least(0));
  add_bool_flag(t, "save_on_interrupt", a->save_on_interrupt,
                "on SIGINT / SIGTERM, save a checkpoint of the last finished step before exiting "
                "(exit status 130 / 143 either way)");
  add_value(t, "device", a->device,
            "cpu (default) | cuda: the model on this rank's GPU; the ZeRO state and optimizer "
            "there too without offload, else in host memory");
  add_value(t, "dist_backend", a->dist_backend,
            "with --device cuda and several ranks: how ZeRO's collectives travel: nccl, mpi "
            "(the host communicator, staged through pinned host memory on the comm stream; for "
            "ranks that share a GPU or hosts without NCCL), or auto (default: nccl unless this "
            "node has more ranks than GPUs)")
      ->check(CLI::IsMember({"auto", "nccl", "mpi"}));
  add_bool_flag(t, "offload_overlap", a->offload_overlap,
                "with --device cuda and offload_optimizer cpu: run each unit's CPU Adam during "
                "backward (exact only without gradient_clipping and fp16; elsewhere after "
                "backward, as without the flag). Keeps a rollback copy of the offloaded state; "
                "pays off only when backward is long next to the CPU Adam");
  add_bool_flag(t, "quiet", a->quiet, "no live progress line");
  add_bool_flag(t, "verbose", a->verbose,
                "print the whole effective DeepSpeed config (always written to "
                "OUTPUT_DIR/ds_config.effective.json)");
}

// HF TrainingArguments' hyperparameters: they resolve the config's "auto" values. --warmup_steps is
// read as a number into `warmup_steps_flag` (transformers 5 takes a fraction in (0, 1) as a ratio
// of the steps), split once parsed.
void add_hyperparameter_flags(CLI::App* t, runtime::TrainArgs& args,
                              std::optional<double>& warmup_steps_flag) {
  runtime::TrainArgs* a = &args;
  add_value(t, "per_device_train_batch_size", a->per_device_train_batch_size,
            "train_micro_batch_size_per_gpu")
      ->check(int_at_least(1));
  add_value(t, "gradient_accumulation_steps", a->gradient_accumulation_steps,
            "gradient_accumulation_steps")
      ->check(int_at_least(1));
  add_value(t, "learning_rate", a->learning_rate,
            "optimizer.params.lr (and the warmup schedules' warmup_max_lr)")
      ->check(real_at_least(0));
  add_value(t, "weight_decay", a->weight_decay, "optimizer.params.weight_decay")
      ->check(real_at_least(0));
  add_value(t, "adam_beta1", a->adam_beta1, "optimizer.params.betas[0]")
      ->check(real_at_least(0, false, 1));
  add_value(t, "adam_beta2", a->adam_beta2, "optimizer.params.betas[1]")
      ->check(real_at_least(0, false, 1));
  add_value(t, "adam_epsilon", a->adam_epsilon, "optimizer.params.eps")->check(real_at_least(0));
  add_value(t, "max_grad_norm", a->max_grad_norm, "gradient_clipping")->check(real_at_least(0));
  add_value(t, "warmup_steps", warmup_steps_flag,
            "warmup steps (scheduler.params.warmup_num_steps with a scheduler block), or a "
            "fraction in (0, 1) of the total steps")
      ->check(real_at_least(0));
  add_value(t, "warmup_ratio", a->warmup_ratio,
            "warmup = ceil(ratio x total steps) when --warmup_steps is 0 or not given")
      ->check(real_at_least(0, false, 1));
  add_value(t, "lr_scheduler_type", a->lr_scheduler_type,
            "without a scheduler block, HF's schedule: linear (default) | cosine | "
            "cosine_with_restarts | polynomial | constant | constant_with_warmup | inverse_sqrt | "
            "cosine_with_min_lr | warmup_stable_decay");
  add_value(t, "lr_scheduler_kwargs", a->lr_scheduler_kwargs,
            "JSON object of the HF schedule's extra arguments, e.g. '{\"num_cycles\": 2}'");
  add_value(t, "bf16", a->bf16, "bf16.enabled (true/false)")->expected(0, 1)->default_str("true");
  add_value(t, "fp16", a->fp16, "fp16.enabled (true/false)")->expected(0, 1)->default_str("true");
}

}  // namespace

void add_train_command(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<runtime::TrainArgs>();
  CLI::App* t = app.add_subcommand(
      "train",
      "train or fine-tune a model with ZeRO (world size 1 alone; N ranks under mpirun / zero "
      "launch)");
  t->footer(
      "Flags named like the HF TrainingArguments resolve \"auto\" values of the config; a flag "
      "counts only when given,\nand one that contradicts an explicit config value is an error "
      "naming both. Metrics go to OUTPUT_DIR/metrics.jsonl\n(one JSON object per optimizer step). "
      "Data order is sequential by default (HF shuffles; pass --data_order shuffle).");
  add_input_flags(t, *a);
  add_run_flags(t, *a);
  auto warmup_steps_flag = std::make_shared<std::optional<double>>();
  add_hyperparameter_flags(t, *a, *warmup_steps_flag);
  // HF TrainingArguments flags that mean nothing here: accepted (scripts pass them) with a note.
  auto do_train = std::make_shared<bool>(false);
  auto report_to = std::make_shared<std::vector<std::string>>();
  auto local_rank = std::make_shared<int64_t>(-1);
  add_bool_flag(t, "do_train", *do_train, "accepted for HF scripts (zero train always trains)");
  add_value(t, "report_to", *report_to,
            "accepted for HF scripts: metrics go to OUTPUT_DIR/metrics.jsonl and the csv_monitor")
      ->expected(1, 16);
  add_value(t, "local_rank", *local_rank,
            "accepted for DeepSpeed-launched scripts (the rank comes from MPI)");
  // A flag repeated on the command line: the last one wins (as with argparse).
  for (CLI::Option* opt : t->get_options())
    opt->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  t->callback([a, do_train, report_to, local_rank, warmup_steps_flag, &exit_code] {
    if (a->bf16.value_or(false) && a->fp16.value_or(false)) {
      std::fprintf(stderr,
                   "error: --bf16 and --fp16 are both set: choose one (HF and DeepSpeed refuse "
                   "both too)\n");
      exit_code = 2;
      return;
    }
    if (*warmup_steps_flag) {
      Status s =
          runtime::split_warmup_steps_flag(**warmup_steps_flag, &a->warmup_steps, &a->warmup_ratio);
      if (!s.ok()) {
        std::fprintf(stderr, "error: %s\n", s.message().c_str());
        exit_code = 2;
        return;
      }
    }
    if (a->max_steps == -1) a->max_steps = 0;  // HF's "not set": steps come from the epochs
    if (*do_train) a->cli_notes.push_back("--do_train: accepted for HF scripts; zero train trains");
    for (const std::string& r : *report_to) {
      if (r != "none") {
        a->cli_notes.push_back("--report_to " + r +
                               ": not supported; metrics go to OUTPUT_DIR/metrics.jsonl (and "
                               "the ds_config csv_monitor)");
      }
    }
    if (*local_rank >= 0) {
      a->cli_notes.push_back("--local_rank: ignored; each rank's place comes from MPI");
    }
    // `zero train ... | head`: a closed stdout must not kill the run (the trainer stops printing
    // progress and says so on stderr); ignored for the whole process, so the exit flush is safe.
    std::signal(SIGPIPE, SIG_IGN);
    auto world = make_world();
    if (!world.ok()) {
      std::fprintf(stderr, "error: %s\n", world.status().message().c_str());
      exit_code = 1;
      return;
    }
    exit_code = runtime::run_training(*a, *world->comm);
  });
}

}  // namespace zero::cli
