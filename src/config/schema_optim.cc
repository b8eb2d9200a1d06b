// Optimizer and lr-scheduler tables of the ds_config schema: the types DeepSpeed accepts and the
// constructor parameters of each (DeepSpeed's engine._configure_basic_optimizer, lr_schedules.py).
#include "config/schema.h"
#include "config/schema_builders.h"

namespace zero::config {
namespace {

using namespace schema_builders;  // NOLINT: the tables read better unqualified
using enum Kind;

constexpr KeySpec betas(std::string_view def) {
  return {.name = "betas", .kind = kNumList, .default_json = def};
}
// Accepted so that the combination rule can name it: DeepSpeed raises on it.
constexpr KeySpec kMaxGradNorm = {
    .name = "max_grad_norm", .kind = kFloat, .default_json = "", .nullable = true};

constexpr KeySpec kAdamParams[] = {
    real("lr", "0.001"),
    betas("[0.9, 0.999]"),
    real("eps", "1e-08"),
    real("weight_decay", "0.0"),
    flag("bias_correction", "true"),
    {.name = "adam_w_mode",
     .kind = kBool,
     .default_json = "true",
     .note = "DeepSpeed's Adam is AdamW unless adam_w_mode is false"},
    flag("torch_adam", "false", kNone),
    flag("amsgrad", "false", kUnimpl),
    flag("set_grad_none", "true", kNone),
    flag("fp32_optimizer_states", "true", kNone),
    {.name = "foreach", .kind = kBool, .default_json = "", .support = kNone, .nullable = true},
    {.name = "fused", .kind = kBool, .default_json = "", .support = kNone, .nullable = true},
    {.name = "capturable", .kind = kBool, .default_json = "", .support = kNone},
    {.name = "maximize", .kind = kBool, .default_json = "", .support = kUnimpl},
    {.name = "differentiable", .kind = kBool, .default_json = "", .support = kNone},
    kMaxGradNorm,
};
constexpr BlockSpec kAdam{"optimizer.params", kAdamParams, UnknownKeys::kError};

constexpr KeySpec kLambParams[] = {
    real("lr", "0.001"),
    flag("bias_correction", "true"),
    betas("[0.9, 0.999]"),
    real("eps", "1e-08"),
    flag("eps_inside_sqrt", "false"),
    real("weight_decay", "0.0"),
    real("max_coeff", "10.0"),
    real("min_coeff", "0.01"),
    flag("amsgrad", "false", kUnimpl),
    kMaxGradNorm,
};
constexpr BlockSpec kLamb{"optimizer.params", kLambParams, UnknownKeys::kError};

constexpr KeySpec kOneBitAdamParams[] = {
    real("lr", "0.001"),
    count("freeze_step", "100000"),
    flag("bias_correction", "true"),
    betas("[0.9, 0.999]"),
    real("eps", "1e-08"),
    flag("eps_inside_sqrt", "false"),
    real("weight_decay", "0.0"),
    flag("amsgrad", "false"),
    flag("cuda_aware", "false"),
    text("comm_backend_name", "\"nccl\""),
    kMaxGradNorm,
};
constexpr BlockSpec kOneBitAdam{"optimizer.params", kOneBitAdamParams, UnknownKeys::kError};

constexpr KeySpec kZeroOneAdamParams[] = {
    real("lr", "0.001"),
    flag("bias_correction", "true"),
    betas("[0.9, 0.999]"),
    real("eps", "1e-08"),
    flag("eps_inside_sqrt", "false"),
    real("weight_decay", "0.0"),
    count("var_freeze_step", "100000"),
    count("var_update_scaler", "16"),
    count("local_step_scaler", "32678"),
    count("local_step_clipper", "16"),
    flag("amsgrad", "false"),
    flag("cuda_aware", "false"),
    text("comm_backend_name", "\"nccl\""),
    kMaxGradNorm,
};
constexpr BlockSpec kZeroOneAdam{"optimizer.params", kZeroOneAdamParams, UnknownKeys::kError};

constexpr KeySpec kOneBitLambParams[] = {
    real("lr", "0.001"),
    count("freeze_step", "100000"),
    flag("bias_correction", "true"),
    betas("[0.9, 0.999]"),
    real("eps", "1e-08"),
    flag("eps_inside_sqrt", "false"),
    real("weight_decay", "0.0"),
    real("max_coeff", "10.0"),
    real("min_coeff", "0.01"),
    flag("amsgrad", "false"),
    flag("cuda_aware", "false"),
    text("comm_backend_name", "\"nccl\""),
    real("coeff_beta", "0.9"),
    real("factor_max", "4.0"),
    real("factor_min", "0.5"),
    real("factor_threshold", "0.1"),
    kMaxGradNorm,
};
constexpr BlockSpec kOneBitLamb{"optimizer.params", kOneBitLambParams, UnknownKeys::kError};

constexpr KeySpec kAdagradParams[] = {
    real("lr", "0.01"),
    real("eps", "1e-10"),
    real("weight_decay", "0.0"),
    real("lr_decay", "0.0"),
    real("initial_accumulator_value", "0.0"),
    {.name = "foreach", .kind = kBool, .default_json = "", .support = kNone, .nullable = true},
    {.name = "maximize", .kind = kBool, .default_json = "", .support = kUnimpl},
    {.name = "differentiable", .kind = kBool, .default_json = "", .support = kNone},
    {.name = "fused", .kind = kBool, .default_json = "", .support = kNone, .nullable = true},
    kMaxGradNorm,
};
constexpr BlockSpec kAdagrad{"optimizer.params", kAdagradParams, UnknownKeys::kError};

constexpr KeySpec kLionParams[] = {
    real("lr", "0.001"),
    betas("[0.9, 0.99]"),
    real("weight_decay", "0.0"),
    kMaxGradNorm,
};
constexpr BlockSpec kLion{"optimizer.params", kLionParams, UnknownKeys::kError};

// mup's and torch's optimizers take keyword arguments we do not model.
constexpr KeySpec kFreeParams[] = {kMaxGradNorm};
constexpr BlockSpec kFreeOptimizer{"optimizer.params", kFreeParams, UnknownKeys::kAllow};

constexpr TypeSpec kOptimizerTypes[] = {
    {.name = "Adam", .case_insensitive = true, .params = &kAdam},
    {.name = "AdamW", .case_insensitive = true, .params = &kAdam},
    {.name = "Lamb", .case_insensitive = true, .params = &kLamb, .zero_supported = false},
    {.name = "OneBitAdam",
     .case_insensitive = true,
     .params = &kOneBitAdam,
     .support = kUnimpl,
     .zero_supported = false,
     .zero_incompatible = true},
    {.name = "ZeroOneAdam",
     .case_insensitive = true,
     .params = &kZeroOneAdam,
     .support = kUnimpl,
     .zero_supported = false,
     .zero_incompatible = true},
    {.name = "OneBitLamb",
     .case_insensitive = true,
     .params = &kOneBitLamb,
     .support = kUnimpl,
     .zero_supported = false,
     .zero_incompatible = true},
    {.name = "Adagrad", .case_insensitive = true, .params = &kAdagrad, .support = kUnimpl},
    {.name = "Lion", .case_insensitive = true, .params = &kLion, .support = kUnimpl},
    {.name = "MuAdam",
     .case_insensitive = true,
     .params = &kFreeOptimizer,
     .support = kUnimpl,
     .zero_supported = false},
    {.name = "MuAdamW",
     .case_insensitive = true,
     .params = &kFreeOptimizer,
     .support = kUnimpl,
     .zero_supported = false},
    {.name = "MuSGD",
     .case_insensitive = true,
     .params = &kFreeOptimizer,
     .support = kUnimpl,
     .zero_supported = false},
    {.name = "Muon", .case_insensitive = true, .params = &kFreeOptimizer, .support = kUnimpl},
    // Any other name is looked up case-sensitively in torch.optim.
    {.name = "SGD", .params = &kFreeOptimizer, .support = kUnimpl, .zero_supported = false},
    {.name = "RMSprop", .params = &kFreeOptimizer, .support = kUnimpl, .zero_supported = false},
    {.name = "Adadelta", .params = &kFreeOptimizer, .support = kUnimpl, .zero_supported = false},
    {.name = "Adamax", .params = &kFreeOptimizer, .support = kUnimpl, .zero_supported = false},
    {.name = "NAdam", .params = &kFreeOptimizer, .support = kUnimpl, .zero_supported = false},
    {.name = "RAdam", .params = &kFreeOptimizer, .support = kUnimpl, .zero_supported = false},
    {.name = "ASGD", .params = &kFreeOptimizer, .support = kUnimpl, .zero_supported = false},
    {.name = "Rprop", .params = &kFreeOptimizer, .support = kUnimpl, .zero_supported = false},
    {.name = "SparseAdam", .params = &kFreeOptimizer, .support = kUnimpl, .zero_supported = false},
    {.name = "LBFGS", .params = &kFreeOptimizer, .support = kUnimpl, .zero_supported = false},
};

constexpr KeySpec kLastBatchIteration = count("last_batch_iteration", "-1", -1);
constexpr KeySpec kWarmupType = {
    .name = "warmup_type", .kind = kEnum, .default_json = "\"log\"", .choices = "log|linear"};
constexpr KeySpec kTotalNumSteps = {
    .name = "total_num_steps", .kind = kInt, .default_json = "", .min = 0, .required = true};

constexpr KeySpec kLrRangeTestParams[] = {
    real("lr_range_test_min_lr", "0.001"),
    count("lr_range_test_step_size", "2000", 1),
    real("lr_range_test_step_rate", "1.0"),
    flag("lr_range_test_staircase", "false"),
    kLastBatchIteration,
};
constexpr BlockSpec kLrRangeTest{"scheduler.params", kLrRangeTestParams, UnknownKeys::kError};

constexpr KeySpec kOneCycleParams[] = {
    {.name = "cycle_min_lr", .kind = kFloat, .default_json = "", .min = 0, .required = true},
    {.name = "cycle_max_lr", .kind = kFloat, .default_json = "", .min = 0, .required = true},
    real("decay_lr_rate", "0.0"),
    count("cycle_first_step_size", "2000", 1),
    {.name = "cycle_second_step_size",
     .kind = kInt,
     .default_json = "null",
     .nullable = true,
     .min = 1},
    count("cycle_first_stair_count", "0"),
    {.name = "cycle_second_stair_count",
     .kind = kInt,
     .default_json = "null",
     .nullable = true,
     .min = 0},
    count("decay_step_size", "0"),
    flag("cycle_momentum", "true"),
    real("cycle_min_mom", "0.8"),
    real("cycle_max_mom", "0.9"),
    real("decay_mom_rate", "0.0"),
    kLastBatchIteration,
};
constexpr BlockSpec kOneCycle{"scheduler.params", kOneCycleParams, UnknownKeys::kError};

constexpr KeySpec kWarmupLrParams[] = {
    real("warmup_min_lr", "0.0"),
    real("warmup_max_lr", "0.001"),
    count("warmup_num_steps", "1000"),
    kWarmupType,
    kLastBatchIteration,
};
constexpr BlockSpec kWarmupLr{"scheduler.params", kWarmupLrParams, UnknownKeys::kError};

constexpr KeySpec kWarmupDecayLrParams[] = {
    kTotalNumSteps,
    real("warmup_min_lr", "0.0"),
    real("warmup_max_lr", "0.001"),
    count("warmup_num_steps", "1000"),
    kWarmupType,
    kLastBatchIteration,
};
constexpr BlockSpec kWarmupDecayLr{"scheduler.params", kWarmupDecayLrParams, UnknownKeys::kError};

constexpr KeySpec kWarmupCosineLrParams[] = {
    kTotalNumSteps,
    real("warmup_min_ratio", "0.0"),
    count("warmup_num_steps", "1000"),
    real("cos_min_ratio", "0.0001"),
    kWarmupType,
    kLastBatchIteration,
};
constexpr BlockSpec kWarmupCosineLr{"scheduler.params", kWarmupCosineLrParams, UnknownKeys::kError};

constexpr BlockSpec kFreeScheduler{"scheduler.params", {}, UnknownKeys::kAllow};

constexpr TypeSpec kSchedulerTypes[] = {
    {.name = "LRRangeTest", .params = &kLrRangeTest},
    {.name = "OneCycle", .params = &kOneCycle},
    {.name = "WarmupLR", .params = &kWarmupLr},
    {.name = "WarmupDecayLR", .params = &kWarmupDecayLr},
    {.name = "WarmupCosineLR", .params = &kWarmupCosineLr},
    // Any other name is looked up in torch.optim.lr_scheduler.
    {.name = "StepLR", .params = &kFreeScheduler, .support = kUnimpl},
    {.name = "MultiStepLR", .params = &kFreeScheduler, .support = kUnimpl},
    {.name = "ExponentialLR", .params = &kFreeScheduler, .support = kUnimpl},
    {.name = "CosineAnnealingLR", .params = &kFreeScheduler, .support = kUnimpl},
    {.name = "CosineAnnealingWarmRestarts", .params = &kFreeScheduler, .support = kUnimpl},
    {.name = "LinearLR", .params = &kFreeScheduler, .support = kUnimpl},
    {.name = "ConstantLR", .params = &kFreeScheduler, .support = kUnimpl},
    {.name = "PolynomialLR", .params = &kFreeScheduler, .support = kUnimpl},
    {.name = "OneCycleLR", .params = &kFreeScheduler, .support = kUnimpl},
    {.name = "CyclicLR", .params = &kFreeScheduler, .support = kUnimpl},
};

}  // namespace

std::span<const TypeSpec> optimizer_types() { return kOptimizerTypes; }
std::span<const TypeSpec> scheduler_types() { return kSchedulerTypes; }

}  // namespace zero::config
