// HF Trainer's step and warmup counts (see train_steps.h).
#include "runtime/train_steps.h"

#include <cmath>

#include <fmt/format.h>

namespace zero::runtime {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// Steps past this are refused: exactly representable in a double, and beyond any real run.
constexpr double kMaxSteps = 9.0e15;

}  // namespace

StatusOr<int64_t> steps_for_epochs(double num_train_epochs, const EpochGeometry& g) {
  if (!std::isfinite(num_train_epochs) || !(num_train_epochs > 0)) {
    return invalid_argument("--num_train_epochs must be a number > 0, got {}", num_train_epochs);
  }
  if (g.num_samples <= 0 || g.micro_batch <= 0 || g.grad_accum <= 0 || g.world_size <= 0) {
    return invalid_argument(
        "--num_train_epochs: cannot count steps for {} samples, micro batch {}, accumulation {}, "
        "world size {}",
        g.num_samples, g.micro_batch, g.grad_accum, g.world_size);
  }
  const int64_t batches_per_rank = ceil_div(ceil_div(g.num_samples, g.micro_batch), g.world_size);
  const int64_t steps_per_epoch = std::max<int64_t>(1, ceil_div(batches_per_rank, g.grad_accum));
  const double steps = std::ceil(num_train_epochs * static_cast<double>(steps_per_epoch));
  if (steps > kMaxSteps) {
    return invalid_argument("--num_train_epochs {} gives {} optimizer steps, too many",
                            num_train_epochs, steps);
  }
  return static_cast<int64_t>(steps);
}

StatusOr<int64_t> resolve_max_steps(int64_t max_steps, std::optional<double> num_train_epochs,
                                    const EpochGeometry& geometry) {
  if (max_steps > 0) return max_steps;
  if (!num_train_epochs) {
    if (max_steps < 0) {
      return invalid_argument("--max_steps {}: must be > 0 (or give --num_train_epochs)",
                              max_steps);
    }
    return invalid_argument("--max_steps (or --num_train_epochs) is required");
  }
  return steps_for_epochs(*num_train_epochs, geometry);
}

Status split_warmup_steps_flag(double value, std::optional<int64_t>* warmup_steps,
                               std::optional<double>* warmup_ratio) {
  if (std::isfinite(value) && value > 0 && value < 1) {
    if (*warmup_ratio) {
      return invalid_argument(
          "--warmup_steps {} is a ratio of the total steps (transformers 5), and --warmup_ratio {} "
          "is given too: give one",
          value, **warmup_ratio);
    }
    *warmup_ratio = value;
    return ok_status();
  }
  if (!std::isfinite(value) || value < 0 || value != std::floor(value) || value > kMaxSteps) {
    return invalid_argument(
        "--warmup_steps {}: expected a whole number of steps >= 0, or a fraction in (0, 1) of the "
        "total steps",
        value);
  }
  *warmup_steps = static_cast<int64_t>(value);
  return ok_status();
}

StatusOr<std::optional<int64_t>> resolve_warmup_steps(std::optional<int64_t> warmup_steps,
                                                      std::optional<double> warmup_ratio,
                                                      int64_t total_steps, std::string* note) {
  if (warmup_steps && *warmup_steps < 0) {
    return invalid_argument("--warmup_steps must be >= 0, got {}", *warmup_steps);
  }
  if (warmup_ratio && !(*warmup_ratio >= 0 && *warmup_ratio <= 1)) {
    return invalid_argument("--warmup_ratio must lie in [0, 1], got {}", *warmup_ratio);
  }
  if (warmup_steps && *warmup_steps > 0) {
    if (warmup_ratio && *warmup_ratio > 0 && note != nullptr) {
      *note = fmt::format(
          "note: both --warmup_steps {} and --warmup_ratio {} given: --warmup_steps wins (as in "
          "HF's TrainingArguments)",
          *warmup_steps, *warmup_ratio);
    }
    return std::optional<int64_t>(*warmup_steps);
  }
  if (warmup_ratio) {
    return std::optional<int64_t>(
        static_cast<int64_t>(std::ceil(static_cast<double>(total_steps) * *warmup_ratio)));
  }
  return warmup_steps;  // 0 when given as 0, else nullopt
}

}  // namespace zero::runtime
