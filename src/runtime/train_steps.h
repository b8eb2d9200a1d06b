// How many optimizer steps `zero train` runs and how many of them warm up, from the HF-style
// flags (--max_steps, --num_train_epochs, --warmup_steps, --warmup_ratio), counted as the HF
// Trainer counts them. Plain functions, tested without training.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/status.h"

namespace zero::runtime {

// The batch geometry an epoch is counted in.
struct EpochGeometry {
  int64_t num_samples = 0;  // samples (blocks of block_size + 1 tokens) in the data
  int64_t micro_batch = 0;  // per rank, per micro-step
  int64_t grad_accum = 0;   // micro-steps per optimizer step
  int64_t world_size = 1;   // data-parallel ranks
};

// HF Trainer (set_initial_training_values, transformers after 4.46; 4.46 and older floor
// len / grad_accum instead of rounding it up): the dataloader has
// ceil(S / micro) batches, accelerate shards them over the ranks with even batches, so each rank
// sees len = ceil(ceil(S / micro) / world); an epoch is max(ceil(len / grad_accum), 1) optimizer
// steps and the run is ceil(epochs * that). Errors name --num_train_epochs.
StatusOr<int64_t> steps_for_epochs(double num_train_epochs, const EpochGeometry& geometry);

// The run's optimizer steps: --max_steps when > 0 (it wins over --num_train_epochs, as in HF),
// else from the epochs (HF's --max_steps -1 means "not given"); neither is INVALID_ARGUMENT naming
// the flags.
StatusOr<int64_t> resolve_max_steps(int64_t max_steps, std::optional<double> num_train_epochs,
                                    const EpochGeometry& geometry);

// --warmup_steps as transformers 5 reads it: an integer number of steps, or a fraction in (0, 1)
// of the total steps (stored in *warmup_ratio; an error when --warmup_ratio is given too). Other
// values (negative, non-integer >= 1, not finite) are INVALID_ARGUMENT naming the flag.
Status split_warmup_steps_flag(double value, std::optional<int64_t>* warmup_steps,
                               std::optional<double>* warmup_ratio);

// TrainingArguments.get_warmup_steps (transformers 4.x): --warmup_steps when > 0, else
// ceil(total * --warmup_ratio); nullopt when neither flag was given. A ratio outside [0, 1] is
// INVALID_ARGUMENT (HF's check). When both are given and warmup_steps > 0 wins, `note` says so.
StatusOr<std::optional<int64_t>> resolve_warmup_steps(std::optional<int64_t> warmup_steps,
                                                      std::optional<double> warmup_ratio,
                                                      int64_t total_steps, std::string* note);

}  // namespace zero::runtime
