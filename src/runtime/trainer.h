// The `zero train` job: resolve the ds_config against the HF-Trainer-style flags, build the data
// stream, the model and the engine for this rank, run the steps, write metrics.jsonl and logs (rank
// 0 only), and save the final model. The flags are optional<> because a flag counts only when it
// was given on the command line (docs/design.md §2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"

namespace zero::runtime {

struct TrainArgs {
  std::string deepspeed;  // ds_config path (or base64); empty: an empty config
  std::string model;      // HF directory or preset:NAME
  std::string train_file;
  // Evaluation (runtime/evaluation.h): the validation set, in the train file's format; evaluated
  // every eval_steps steps (0: only after the last step) and, with eval_on_start, before step 1.
  std::optional<std::string> validation_file;
  int64_t eval_steps = 0;
  int64_t per_device_eval_batch_size = 8;  // HF's default
  bool eval_on_start = false;
  std::optional<std::string> data_dtype;  // uint8 | uint16 | uint32
  std::string data_order = "sequential";  // sequential | shuffle
  std::string output_dir;
  bool overwrite_output_dir = false;
  int64_t block_size = 0;  // 0: the model's context length, at most 1024
  int64_t max_steps = 0;
  std::optional<double> num_train_epochs;
  int64_t seed = 42;
  int64_t logging_steps = 0;  // 0: DeepSpeed's steps_per_print (or 10)
  bool save_final = false;
  std::optional<std::string> save_dtype;  // fp32 | bf16 | fp16 for --save_final
  bool gradient_checkpointing = false;
  std::optional<std::string> resume_from_checkpoint;
  int64_t save_steps = 0;
  std::optional<int64_t> save_total_limit;
  bool save_on_interrupt = false;  // SIGINT / SIGTERM: save a checkpoint before exiting
  std::string device = "cpu";
  std::string dist_backend = "auto";  // the device path's collectives (EngineOptions::dist_backend)
  // offload_optimizer on a device: run each unit's CPU Adam during backward where that is exact
  // (EngineOptions::offload_overlap).
  bool offload_overlap = false;
  bool quiet = false;                  // no live progress line (tests, logs)
  int64_t max_nonfinite_steps = 10;    // consecutive NaN / Inf losses before stopping; 0: never
  std::vector<std::string> cli_notes;  // notes about accepted no-op flags, printed on rank 0
  bool verbose = false;  // print the whole effective config (it is in OUTPUT_DIR either way)

  // TrainingArguments flags resolving "auto" config values.
  std::optional<int64_t> per_device_train_batch_size;
  std::optional<int64_t> gradient_accumulation_steps;
  std::optional<double> learning_rate;
  std::optional<double> weight_decay;
  std::optional<double> adam_beta1;
  std::optional<double> adam_beta2;
  std::optional<double> adam_epsilon;
  std::optional<double> max_grad_norm;
  std::optional<int64_t> warmup_steps;
  std::optional<double> warmup_ratio;  // ceil(ratio * steps) warmup steps when warmup_steps is 0
  // Without a scheduler block: HF's schedule of that name (optim/hf_lr_schedule.h; default
  // linear) with the JSON object of --lr_scheduler_kwargs.
  std::optional<std::string> lr_scheduler_type;
  std::optional<std::string> lr_scheduler_kwargs;
  std::optional<bool> bf16;
  std::optional<bool> fp16;
};

// Runs the job on this rank of `comm`. Returns 0 on success, 2 for bad input (config, flags,
// files), 1 for a failure during training; errors are printed on stderr naming what is wrong.
int run_training(const TrainArgs& args, Communicator& comm);

}  // namespace zero::runtime
