// Engine: one training step composed of named phases (docs/design.md §5). This is the single-rank
// engine, the oracle every distributed configuration is compared against: it owns fp32 master
// weights, optimizer state and fp32 gradient accumulators per unit, and a working copy of the
// parameters in the model dtype (fp32, or values rounded to bf16 / fp16 for mixed precision).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "model/param_access.h"
#include "model/transformer.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer_spec.h"

namespace zero::runtime {

struct EngineOptions {
  model::ModelConfig model_config;
  model::TransformerOptions transformer;
  DType dtype = DType::kF32;  // model / gradient dtype; master weights and moments are fp32
  optim::OptimizerSpec optimizer;
  optim::LrSchedule schedule = optim::LrSchedule::constant(1e-3);
  optim::LossScalerConfig loss_scaler;  // only used for fp16
  double gradient_clipping = 0.0;       // 0: off
};

// One micro-batch of this rank: tokens and targets, (B, T) each.
struct MicroBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> targets;
  int64_t batch = 0;  // B
  int64_t seq = 0;    // T
};

struct StepResult {
  double loss = 0.0;        // mean token cross-entropy over the global batch, before the update
  double lr = 0.0;          // the rate used by this update (0 if skipped)
  double grad_norm = 0.0;   // global, unscaled, before clipping (inf/NaN on overflow)
  double loss_scale = 1.0;  // the scale used in this step's backward
  bool skipped = false;
  int64_t tokens = 0;
};

// Fills unit u's full flat fp32 buffer with its initial values.
using UnitInitFn = std::function<Status(int u, float* dst, int64_t numel)>;

class Engine {
 public:
  static StatusOr<std::unique_ptr<Engine>> create(EngineOptions options, const UnitInitFn& init);
  ~Engine();

  // Forward + backward over every micro-batch (gradient accumulation), then the update.
  StatusOr<StepResult> train_step(const std::vector<MicroBatch>& micro_batches);

  // Optimizer steps attempted so far (skipped ones included), as DeepSpeed's global_steps.
  int64_t global_step() const { return global_step_; }
  model::Transformer& model() { return *model_; }
  const model::ModelLayout& layout() const { return model_->layout(); }
  // The working parameters (model dtype values) as a ParamAccess, e.g. for generation.
  model::ParamAccess& params();
  // fp32 master weights of unit u.
  const float* master(int u) const { return units_[static_cast<size_t>(u)].master.f32(); }
  const optim::LossScaler& loss_scaler() const { return *scaler_; }
  const optim::LrSchedule& schedule() const { return options_.schedule; }

 private:
  struct UnitState {
    Tensor master;      // fp32 master weights
    Tensor working;     // fp32 values as the model sees them (rounded to the model dtype)
    Tensor exp_avg;     // Adam / Lamb first moment
    Tensor exp_avg_sq;  // second moment
    Tensor grad_accum;  // fp32 gradient accumulated over micro-steps (scaled by the loss scale)
    Tensor grad_micro;  // one micro-step's gradient, as the model produces it
    std::vector<int64_t> tensor_offsets;  // parameter boundaries (Lamb trust ratios)
  };
  class WorkingParams;
  class AccumulatingGrads;

  explicit Engine(EngineOptions options);
  void zero_grads();
  // Phases of a step.
  double forward_backward(const std::vector<MicroBatch>& micro_batches, float loss_scale);
  void global_norm(double* norm_scaled, bool* nonfinite) const;
  void apply_update(double lr, float grad_multiplier);
  void refresh_working(int u);

  EngineOptions options_;
  std::unique_ptr<model::Transformer> model_;
  std::vector<UnitState> units_;
  std::unique_ptr<WorkingParams> working_params_;
  std::unique_ptr<AccumulatingGrads> grads_;
  std::unique_ptr<optim::LossScaler> scaler_;
  int64_t global_step_ = 0;
  int64_t optimizer_updates_ = 0;  // successful updates (Adam's step counter)
};

}  // namespace zero::runtime
