// What every rank of `zero train` must agree on (run_fingerprint.h).
#include "runtime/run_fingerprint.h"

#include <string>

namespace zero::runtime {

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

}  // namespace zero::runtime
