// Engine: one training step composed of named phases (docs/design.md §5). This is the single-rank
// engine, the oracle every distributed configuration is compared against: it owns fp32 master
// weights, optimizer state and fp32 gradient accumulators per unit, and a working copy of the
// parameters in the model dtype (fp32, or bf16 / fp16 values stored as such for mixed precision).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/communicator.h"
#include "config/zero_rules.h"
#include "core/pinned_memory.h"
#include "core/status.h"
#include "core/tensor.h"
#include "device/backend.h"
#include "model/param_access.h"
#include "model/transformer.h"
#include "offload/aio_config.h"
#include "optim/loss_scaler.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer_spec.h"
#include "runtime/batch.h"
#include "runtime/device_model.h"
#include "runtime/device_staging.h"
#include "runtime/memory_plan.h"
#include "runtime/offload_options.h"
#include "runtime/offload_pipeline.h"
#include "runtime/optimizer_state_store.h"
#include "runtime/step_timers.h"
#include "runtime/unit_init.h"
#include "sharding/grad_reducer.h"
#include "sharding/param_coordinator.h"
#include "sharding/shard_layout.h"
#include "sharding/zero_options.h"

namespace zero::offload {
class NvmeSwapper;
}  // namespace zero::offload

namespace zero::runtime {

// Makes the model that runs on `ctx`'s device (its kernels queued on ctx.compute()).
using ModelFactory = std::function<StatusOr<std::unique_ptr<model::Model>>(
    const model::ModelConfig&, const model::TransformerOptions&, device::ExecutionContext& ctx)>;

struct EngineOptions {
  model::ModelConfig model_config;
  model::TransformerOptions transformer;
  // Where the model runs (`--device`). On another device than the CPU the ZeRO state (working
  // parameters, gradient buffers, master weights, moments) lives in that device's memory and AdamW
  // runs there (Engine::state_on_device()) when nothing is offloaded, the optimizer is Adam(W) and
  // either the world is one rank or the build has a communicator on device memory (NCCL);
  // otherwise it stays in host memory and each unit is copied to the device
  // and its gradients copied back (runtime/device_staging.h).
  Device device = Device::kCpu;
  // Makes the model on `device` (tests: a model behind the staging copies on the CPU backend).
  // Null: the CPU Transformer, or the device's model (make_device_model).
  ModelFactory model_factory;
  DType dtype = DType::kF32;  // model / gradient dtype; master weights and moments: state_dtypes
  // DeepSpeed's bf16.bf16_master_weights_and_grads / bf16_optimizer_states: the master weights
  // (and moments) in bf16, 6 or 10 bytes per element instead of 12 (OptimizerStateStore; where it
  // is allowed: config::apply_zero_rules). Gradients stay fp32 accumulators.
  StateDtypes state_dtypes;
  optim::OptimizerSpec optimizer;
  optim::LrSchedule schedule = optim::LrSchedule::constant(1e-3);
  optim::LossScalerConfig loss_scaler;  // only used for fp16
  double gradient_clipping = 0.0;       // 0: off
  sharding::ZeroOptions zero;  // stage, overlap, buckets, stage-3 limits (model_dtype := dtype)
  OffloadOptions offload;
  // Memory honesty (memory_plan.h): before allocating, the engine checks what this configuration
  // needs per rank against the machine. The planned micro-batch sizes the activations (0: not
  // counted), and with the planned accumulation steps the token batches of one step, which the
  // trainer holds at once; `resources` replaces the probe of this machine (tests).
  bool check_memory = true;
  int64_t planned_micro_batch = 0;
  int64_t planned_seq_len = 0;
  int64_t planned_grad_accum = 0;
  std::optional<HostResources> resources;
  // Called once on rank 0 with the plan's one line (describe_memory_plan) after the check passed,
  // before the ZeRO state is allocated: what the run will hold where, printed before it holds it.
  std::function<void(const std::string&)> on_memory_plan;
  // offload_optimizer on the device path: let each unit's CPU Adam start as soon as its gradient
  // is final, during backward, where that is exact (no clipping, no fp16 loss scale, state in RAM;
  // runtime/offload_pipeline.h). Off (the default; `zero train --offload_overlap` turns it on):
  // the CPU Adam runs after backward. Opt-in because a GPU's backward is far shorter than the host
  // Adam (gpt2-1558m on an H200: 92 ms vs 310 ms), so the overlap saves at most the backward, and
  // the rollback copy it needs (12 more bytes written per element) costs about as much.
  bool offload_overlap = false;
  // offload_optimizer on the device path at stages 2-3: each rank's fp32 gradient partitions live
  // in page-locked host memory (ZeRO-Offload's layout, gradients_on_host()), each micro-step's
  // reduced shard copied off the device as soon as it is reduced, so the device holds only the
  // buckets in flight and the CPU Adam reads the host partitions directly. False keeps them on the
  // device (4/N bytes per parameter) and downloads them after backward; tests compare the two.
  bool offload_gradients = true;
  // The transport of the device path's collectives at world >= 2 (`--dist_backend`): NCCL, or the
  // host communicator staged through pinned memory (mpi; what auto picks when ranks share a GPU).
  DistBackend dist_backend = DistBackend::kAuto;
  // ds_config wall_clock_breakdown: time the step phases (timers()).
  bool wall_clock_breakdown = false;
  // Loss masks (targets -100, prepared data): the loss is the mean over the unmasked targets of
  // the whole global batch, all micro-steps and ranks (HF's num_items_in_batch), at the cost of
  // one all-reduce of the counts per step. Off, each micro-step's mean weighs the same, which is
  // the same loss when every micro-batch counts B*T targets.
  bool mean_over_global_targets = false;
};

struct StepResult {
  double loss = 0.0;        // mean token cross-entropy over the global batch, before the update
  double lr = 0.0;          // the rate used by this update (0 if skipped)
  double grad_norm = 0.0;   // global, unscaled, before clipping (inf/NaN on overflow)
  double loss_scale = 1.0;  // the scale used in this step's backward
  bool skipped = false;
  int64_t tokens = 0;
};

// Applies the stage / offload rules to `options` once: config::apply_zero_rules, the same function
// `zero config check` asks (Engine::create calls it; the trainer calls it while planning, so what
// it prints is what runs): errors for what cannot run (stage out of
// range, optimizer offload at stage 0, nvme without nvme_path, Lamb sharded across ranks, a bad
// `aio` block or ratio), and, as DeepSpeed does, nvme optimizer offload treated as cpu below stage
// 3 and parameter offload dropped below stage 3 — each returned as a warning to print once.
// Idempotent: sanitized options come back unchanged with no warnings.
StatusOr<std::vector<std::string>> sanitize_engine_options(EngineOptions& options, int world_size);
// The facts apply_zero_rules (config/zero_rules.h) judges, read from engine options.
config::ZeroPlacement zero_placement(const EngineOptions& options, int world_size);

// Whether ZeRO-Offload's CPU Adam overlaps backward (runtime/offload_pipeline.h) for sanitized
// `options` on a device whose state the device path holds: offload_optimizer cpu, no
// offload_param, Adam(W), no gradient clipping, no fp16 loss scale, fp32 optimizer state,
// EngineOptions::offload_overlap. It then keeps a rollback copy of master weights and moments (the
// memory plan counts it).
bool offload_overlaps_backward(const EngineOptions& options);
// Whether the gradient partitions live in page-locked host memory (sharding::ZeroOptions::
// grads_on_host) for sanitized `options` when the device path holds the state (`state_on_device`,
// Engine::choose_state_device): offload_optimizer cpu / nvme at stages 2-3 with
// EngineOptions::offload_gradients. The engine and the memory plan both ask it.
bool gradients_on_host(const EngineOptions& options, bool state_on_device);

// Optional outputs of Engine::update_unit's host Adam, written in the same pass over the state.
struct UnitUpdateOutputs {
  // partition_numel(u) floats each (all three or none): master, exp_avg and exp_avg_sq as they
  // were before the update (the overlapped offload update's rollback copy). Streamed past the
  // caches when the three share their alignment modulo 64 bytes.
  float* prev_master = nullptr;
  float* prev_exp_avg = nullptr;
  float* prev_exp_avg_sq = nullptr;
  // partition_numel(u) values in the model dtype (bf16 / fp16): the updated master rounded to
  // nearest even, bitwise kernels::cpu::cast_from_f32 of it (an offload upload slot).
  void* master_rounded = nullptr;
};

class Engine {
 public:
  // `comm` is the data-parallel group (not owned; must outlive the engine); null = a world of one.
  static StatusOr<std::unique_ptr<Engine>> create(EngineOptions options, const UnitInitFn& init,
                                                  Communicator* comm = nullptr);
  ~Engine();

  // Forward + backward over every micro-batch (gradient accumulation), then the update.
  StatusOr<StepResult> train_step(const std::vector<MicroBatch>& micro_batches);

  // Forward only over this rank's micro-batches (evaluation): no gradients, no optimizer work, no
  // counters change. Stage 3 gathers parameters as in training. Collective: every rank calls it
  // with the same number of micro-batches of the same (B, T) (pad with targets -100); the result
  // is summed over ranks (one all-reduce) and the same on every rank.
  StatusOr<LossSum> eval_loss(const std::vector<MicroBatch>& micro_batches);

  // Optimizer steps attempted so far (skipped ones included), as DeepSpeed's global_steps.
  int64_t global_step() const { return global_step_; }
  model::Model& model() { return *model_; }
  const model::ModelLayout& layout() const { return model_->layout(); }
  // The working parameters (model dtype values; device memory when state_on_device()) as a
  // ParamAccess, e.g. for generation.
  model::ParamAccess& params();
  // Where the model runs, and the device bytes the staging copies hold (0 on the CPU, and 0 when
  // the state is on the device: no staging then).
  Device device() const { return model_->device(); }
  int64_t staging_device_bytes() const;
  // Whether the ZeRO state (working parameters, gradients, master weights, moments) lives in the
  // device's memory and the optimizer runs there (memory().device_bytes counts it). With
  // offload_optimizer the working parameters and gradients do, and master weights and moments stay
  // in host memory (or NVMe): see offload_on_device().
  bool state_on_device() const { return state_device_ != nullptr; }
  // ZeRO-Offload on the device path: the CPU Adam updates the host state from gradients copied
  // off the device, and the new weights are copied back (runtime/offload_pipeline.h).
  bool offload_on_device() const { return offload_ != nullptr; }
  // Whether its CPU Adam overlaps backward (EngineOptions::offload_overlap, where exact).
  bool offload_overlaps() const { return overlap_adam_; }
  // Whether the gradient partitions live in page-locked host memory (gradients_on_host()).
  bool gradients_on_host() const { return grads_ != nullptr && grads_->partitions_on_host(); }
  // Where this run keeps each kind of state, from the engine's own decisions (after the stage /
  // offload rules): what `zero train` prints once, so no two messages can disagree.
  struct Placement {
    std::string parameters, gradients, optimizer_state, activations;
    // Several ranks with the state on a GPU: how ZeRO's collectives travel (NCCL, or a host
    // communicator staged through pinned memory: --dist_backend); empty otherwise.
    std::string collectives;
    // "parameters X; gradients Y; master weights and moments Z; activations W[; collectives C]".
    std::string line() const;
  };
  Placement placement() const;
  // Stage 3 with offload_param on the device path (ZeRO-Infinity): the shards live in host memory
  // (or NVMe) and are copied to the device for each gather (sharding/param_coordinator.h).
  bool params_offloaded() const { return params_->params_offloaded(); }
  // The bytes those copies moved so far (none without them).
  std::optional<sharding::ParamTransfers> param_transfers() const {
    if (!params_->params_offloaded()) return std::nullopt;
    return params_->transfers();
  }
  // Units whose early (overlapped) update was undone because the step turned out non-finite.
  int64_t offload_rolled_back_units() const { return rolled_back_units_; }
  // The pipeline's host times so far (none without it).
  std::optional<OffloadTimes> offload_times() const {
    if (offload_ == nullptr) return std::nullopt;
    return offload_->times();
  }
  // This rank's partition of unit u's fp32 master weights: elements
  // [partition_begin(u), partition_begin(u) + partition_numel(u)) of the padded unit.
  // Null when the unit's state lives on NVMe (see state_on_nvme()) or on the device, or is bf16
  // (EngineOptions::state_dtypes): use read_partition_state, which widens it to fp32.
  const float* master(int u) const { return state_->master(u); }
  int64_t partition_begin(int u) const { return grads_->partition_begin(u); }
  int64_t partition_numel(int u) const { return grads_->partition_numel(u); }
  // Optimizer state of this rank's partition of unit u (same range as master()).
  const float* exp_avg(int u) const { return state_->exp_avg(u); }
  const float* exp_avg_sq(int u) const { return state_->exp_avg_sq(u); }
  // Whether master weights and moments live in NVMe swap files (offload nvme at stage 3).
  bool state_on_nvme() const { return state_->on_nvme(); }
  // Copies this rank's partition of unit u (partition_numel(u) floats each; any pointer may be
  // null to skip it) from wherever it lives: RAM or the swap files. Not concurrent with steps.
  Status read_partition_state(int u, float* master, float* exp_avg, float* exp_avg_sq) const;
  // Successful optimizer updates so far (Adam's step counter; skipped steps do not count).
  int64_t optimizer_updates() const { return optimizer_updates_; }
  const EngineOptions& options() const { return options_; }

  // Everything a checkpoint restores besides the model config: counters, schedule, loss scaler,
  // and a reader filling this rank's partition [begin, end) of unit u's master weights and moments.
  struct RestoreState {
    int64_t global_step = 0;
    int64_t optimizer_updates = 0;
    nlohmann::json schedule_state;     // optim::LrSchedule::state()
    nlohmann::json loss_scaler_state;  // optim::LossScaler::state()
    std::function<Status(int u, int64_t begin, int64_t end, float* master, float* exp_avg,
                         float* exp_avg_sq)>
        read_partition;
  };
  // Replaces the training state (collective: every rank calls it; working parameters are
  // refreshed).
  Status restore(const RestoreState& state);
  const sharding::ShardLayout& shard_layout() const { return *shard_layout_; }
  const sharding::MemoryAccounting& memory() const { return memory_; }
  Communicator& comm() { return *comm_; }
  const optim::LossScaler& loss_scaler() const { return *scaler_; }
  const optim::LrSchedule& schedule() const { return options_.schedule; }
  // This rank's phase times (wall_clock_breakdown; disabled timers stay at zero).
  StepTimers& timers() { return timers_; }

 private:
  explicit Engine(EngineOptions options);
  // Phases of a step.
  StatusOr<double> forward_backward(const std::vector<MicroBatch>& micro_batches, float loss_scale);
  Status global_norm(double* norm_scaled, bool* nonfinite);
  // global_norm with host gradients: the reducer's per-unit sums of squares, taken on the device
  // before each final partition's copy to the host, added in unit order (bitwise the device sum).
  Status global_norm_on_host(double* norm_scaled, bool* nonfinite);
  // Targets != -100 over every micro-batch of every rank (an all-reduce).
  StatusOr<double> count_global_targets(const std::vector<MicroBatch>& micro_batches);
  Status apply_update(double lr, float grad_multiplier);
  // What the model reads parameters from and hands gradients to: the coordinator and the reducer,
  // or the staging copies over them when the model runs on another device.
  model::ParamAccess& model_params();
  model::GradSink& model_grads();
  // Hands a unit's new master weights to the parameter coordinator.
  OptimizerStateStore::InstallFn install_fn();
  // Updates one unit's partition in place (the optimizer math, shared by every placement; the
  // pointers are device memory when the state is on the device). `outputs`: host Adam only.
  // `stream`: one of state_ctx()'s (null: its compute stream).
  void update_unit(int u, double lr, float grad_multiplier,
                   const std::optional<optim::Betas>& betas, int64_t step, const float* grad,
                   const OptimizerStateStore::StateRefs& state,
                   const UnitUpdateOutputs& outputs = {}, device::Stream* stream = nullptr);
  // ZeRO-Offload's overlap (OffloadPipeline): decided once after the store exists; each step
  // begins it before backward, and either finishes it (apply_overlapped_update: the units left,
  // the uploads) or, on a skipped step, restores the units updated early.
  void setup_overlap();
  void begin_overlapped_update();
  Status apply_overlapped_update(double lr, float grad_multiplier,
                                 const std::optional<optim::Betas>& betas);
  void roll_back_overlapped_update();
  // Engine::create's build steps, in order (each reads what the ones before filled in): the host
  // context and the model (with its device context); the shard layout, where the state lives and
  // the communicator the ZeRO collectives use; the memory check before any allocation; the
  // parameter coordinator and gradient reducer (and staging copies); master weights and moments
  // (and the offload pipeline), initialised from `init`.
  Status build_contexts_and_model();
  StatusOr<Communicator*> build_placement();
  Status check_memory_fits() const;
  Status build_sharding(Communicator& zero_comm);
  Status build_optimizer_state(const UnitInitFn& init);
  // The one decision of where the ZeRO state lives: the context to keep it on, or null for host
  // memory (see EngineOptions::device).
  device::ExecutionContext* choose_state_device(int world_size) const;

  EngineOptions options_;
  std::unique_ptr<Communicator> own_comm_;  // the world of one when none was given
  Communicator* comm_ = nullptr;
  std::unique_ptr<device::ExecutionContext> exec_;    // a device model's streams; null on the CPU
  device::ExecutionContext* state_device_ = nullptr;  // exec_ when the state lives there
  // Host memory as a backend: the CPU backend on inline streams (ops run on the calling thread),
  // where the norm and the update of state in host memory run. `overlap_stream_`: the overlapped
  // offload update's, driven from the pipeline's worker thread.
  std::unique_ptr<device::ExecutionContext> host_;
  std::unique_ptr<device::Stream> overlap_stream_;
  // Where the gradient partitions live (the norm runs there) and where the master weights and
  // moments live (the update runs there): state_device_ or host_.
  device::ExecutionContext& grads_ctx() const;
  device::ExecutionContext& state_ctx() const;
  // Several ranks with the state on a device: the communicator on its memory (NCCL), which the
  // coordinator and reducer use; the engine's own scalars go over comm_. Null otherwise.
  std::unique_ptr<Communicator> device_comm_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<sharding::ShardLayout> shard_layout_;
  sharding::MemoryAccounting memory_;
  std::unique_ptr<sharding::ParamCoordinator> params_;
  std::unique_ptr<sharding::GradReducer> grads_;
  std::unique_ptr<StagedParams> staged_params_;  // device model only
  std::unique_ptr<StagedGrads> staged_grads_;
  std::unique_ptr<OptimizerStateStore> state_;  // master weights and moments, where they live
  // A bf16 master widened to fp32 for the host parameter coordinator (install_fn; one partition).
  std::vector<float> install_f32_;
  // offload_optimizer with the rest of the state on the device; null otherwise.
  std::unique_ptr<OffloadPipeline> offload_;
  bool overlap_adam_ = false;  // the CPU Adam overlaps backward (setup_overlap)
  int64_t rolled_back_units_ = 0;
  double overlap_lr_ = 0.0;  // the rate the overlapped updates of this step use
  std::unique_ptr<optim::LossScaler> scaler_;
  int64_t global_step_ = 0;
  int64_t optimizer_updates_ = 0;  // successful updates (Adam's step counter)
  StepTimers timers_;
};

}  // namespace zero::runtime
