// The single-rank engine: train_step reads as its phases (docs/design.md §5).
#include "runtime/engine.h"

#include <cmath>
#include <cstring>

#include <spdlog/spdlog.h>

#include "kernels/norm/norm.h"
#include "model/param_layout.h"
#include "optim/adam.h"
#include "optim/grad_clip.h"
#include "optim/lamb.h"

namespace zero::runtime {

// The model's view of the parameters: the working copy, always resident on one rank.
class Engine::WorkingParams : public model::ParamAccess {
 public:
  explicit WorkingParams(std::vector<UnitState>& units) : units_(units) {}
  const float* acquire(int u) override { return units_[static_cast<size_t>(u)].working.f32(); }
  void release(int) override {}

 private:
  std::vector<UnitState>& units_;
};

// Each micro-step's unit gradient is produced in grad_micro, rounded to the model dtype when it is
// 16-bit (what a 16-bit backward hands over), then added to the fp32 accumulator.
class Engine::AccumulatingGrads : public model::GradSink {
 public:
  AccumulatingGrads(std::vector<UnitState>& units, DType dtype) : units_(units), dtype_(dtype) {}
  float* grad_buffer(int u) override { return units_[static_cast<size_t>(u)].grad_micro.f32(); }
  void grad_ready(int u) override {
    UnitState& s = units_[static_cast<size_t>(u)];
    float* micro = s.grad_micro.f32();
    float* acc = s.grad_accum.f32();
    const int64_t n = s.grad_micro.numel();
    const DType dtype = dtype_;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      acc[i] += round_to_dtype(micro[i], dtype);
      micro[i] = 0.0f;
    }
  }

 private:
  std::vector<UnitState>& units_;
  DType dtype_;
};

Engine::Engine(EngineOptions options) : options_(std::move(options)) {}
Engine::~Engine() = default;

StatusOr<std::unique_ptr<Engine>> Engine::create(EngineOptions options, const UnitInitFn& init) {
  std::unique_ptr<Engine> e(new Engine(std::move(options)));
  e->model_ =
      std::make_unique<model::Transformer>(e->options_.model_config, e->options_.transformer);
  const model::ModelLayout& layout = e->model_->layout();
  e->units_.resize(static_cast<size_t>(layout.num_units()));
  for (int u = 0; u < layout.num_units(); ++u) {
    const model::UnitSpec& spec = layout.unit(u);
    UnitState& s = e->units_[static_cast<size_t>(u)];
    const Shape shape{spec.numel};
    s.master = Tensor(shape);
    s.working = Tensor(shape);
    s.exp_avg = Tensor(shape);
    s.exp_avg_sq = Tensor(shape);
    s.grad_accum = Tensor(shape);
    s.grad_micro = Tensor(shape);
    for (const auto& p : spec.params) s.tensor_offsets.push_back(p.offset);
    s.tensor_offsets.push_back(spec.numel);
    ZERO_RETURN_IF_ERROR(init(u, s.master.f32(), spec.numel));
    e->refresh_working(u);
  }
  e->working_params_ = std::make_unique<WorkingParams>(e->units_);
  e->grads_ = std::make_unique<AccumulatingGrads>(e->units_, e->options_.dtype);
  // Loss scaling exists only for fp16; bf16 and fp32 run at scale 1 (non-finite steps still skip).
  const bool fp16 = e->options_.dtype == DType::kF16;
  e->scaler_ = std::make_unique<optim::LossScaler>(fp16 ? e->options_.loss_scaler
                                                        : optim::LossScalerConfig{});
  return e;
}

model::ParamAccess& Engine::params() { return *working_params_; }

void Engine::refresh_working(int u) {
  UnitState& s = units_[static_cast<size_t>(u)];
  const float* m = s.master.f32();
  float* w = s.working.f32();
  const int64_t n = s.master.numel();
  const DType dtype = options_.dtype;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) w[i] = round_to_dtype(m[i], dtype);
}

void Engine::zero_grads() {
  for (auto& s : units_) std::memset(s.grad_accum.data(), 0, s.grad_accum.nbytes());
}

StatusOr<StepResult> Engine::train_step(const std::vector<MicroBatch>& micro_batches) {
  ZERO_CHECK(!micro_batches.empty(), "train_step needs at least one micro-batch");
  StepResult r;
  r.loss_scale = scaler_->scale();
  for (const auto& mb : micro_batches) r.tokens += mb.batch * mb.seq;

  zero_grads();
  r.loss = forward_backward(micro_batches, static_cast<float>(r.loss_scale));

  double norm_scaled = 0.0;
  bool overflow = false;
  global_norm(&norm_scaled, &overflow);
  const optim::GradScaling scaling =
      optim::grad_scaling(norm_scaled, r.loss_scale, options_.gradient_clipping);
  overflow = overflow || !scaling.finite;
  r.grad_norm = overflow ? std::nan("") : scaling.grad_norm;
  ++global_step_;

  ZERO_ASSIGN_OR_RETURN(optim::LossScaleUpdate scale_update, scaler_->update(overflow));
  if (overflow) {
    // The step is skipped without touching master weights, moments or the schedule.
    r.skipped = true;
    spdlog::warn("{}", optim::overflow_log_line(0, scaler_->config().mode, scale_update));
    return r;
  }
  r.lr = options_.schedule.next_lr();
  apply_update(r.lr, scaling.grad_multiplier);
  options_.schedule.on_successful_update();
  return r;
}

double Engine::forward_backward(const std::vector<MicroBatch>& micro_batches, float loss_scale) {
  // DeepSpeed scales each micro-step's loss by 1/GAS; the per-token gradient also carries the mean
  // over the micro-batch's counted tokens and the loss scale.
  const double gas = static_cast<double>(micro_batches.size());
  double loss_sum = 0.0;
  for (const auto& mb : micro_batches) {
    float loss =
        model_->forward(*working_params_, mb.tokens.data(), mb.targets.data(), mb.batch, mb.seq);
    loss_sum += loss;
    const int64_t counted = model_->counted_targets();
    if (counted == 0) continue;
    const float dloss = static_cast<float>(loss_scale / (static_cast<double>(counted) * gas));
    model_->backward(*working_params_, *grads_, dloss);
  }
  return loss_sum / gas;
}

void Engine::global_norm(double* norm_scaled, bool* nonfinite) const {
  double sum_sq = 0.0;
  bool bad = false;
  for (const auto& s : units_) {
    kernels::cpu::SumSquares part =
        kernels::cpu::sum_squares(s.grad_accum.f32(), s.grad_accum.numel());
    sum_sq += part.sum_sq;
    bad = bad || part.nonfinite;
  }
  *nonfinite = bad || !std::isfinite(sum_sq);
  *norm_scaled = std::sqrt(sum_sq);
}

void Engine::apply_update(double lr, float grad_multiplier) {
  ++optimizer_updates_;
  const optim::OptimizerSpec& spec = options_.optimizer;
  std::optional<optim::Betas> betas = options_.schedule.betas_at(optimizer_updates_);
  const model::ModelLayout& layout = model_->layout();
  for (int u = 0; u < layout.num_units(); ++u) {
    UnitState& s = units_[static_cast<size_t>(u)];
    for (const auto& p : layout.unit(u).params) {
      const double wd = model::decays(p.kind) ? spec.weight_decay : 0.0;
      optim::AdamShard shard;
      shard.param = s.master.f32() + p.offset;
      shard.grad = s.grad_accum.f32() + p.offset;
      shard.exp_avg = s.exp_avg.f32() + p.offset;
      shard.exp_avg_sq = s.exp_avg_sq.f32() + p.offset;
      shard.numel = p.numel();
      if (spec.kind == optim::OptimizerKind::kAdam) {
        optim::AdamArgs args = spec.adam_args(lr, optimizer_updates_, wd);
        if (betas) {
          args.beta1 = static_cast<float>(betas->beta1);
          args.beta2 = static_cast<float>(betas->beta2);
        }
        optim::adam_update(args, shard, grad_multiplier);
      } else {
        optim::LambArgs args = spec.lamb_args(lr, optimizer_updates_, wd);
        if (betas) {
          args.beta1 = static_cast<float>(betas->beta1);
          args.beta2 = static_cast<float>(betas->beta2);
        }
        const int64_t offsets[2] = {0, p.numel()};
        optim::lamb_update(args, shard, offsets, grad_multiplier);
      }
    }
    refresh_working(u);
  }
}

}  // namespace zero::runtime
