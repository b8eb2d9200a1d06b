// The engine: train_step reads as its phases (docs/design.md §5).
#include "runtime/engine.h"

#include "core/device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <omp.h>
#include <spdlog/spdlog.h>

#include "comm/self_communicator.h"
#include "config/zero_rules.h"
#include "kernels/cross_entropy/cross_entropy.h"
#include "kernels/elementwise/elementwise.h"
#include "kernels/matmul/bf16_gemm.h"
#include "kernels/norm/norm.h"
#include "model/param_layout.h"
#include "offload/nvme_swapper.h"
#include "optim/adam.h"
#include "optim/grad_clip.h"
#include "optim/lamb.h"

namespace zero::runtime {

Engine::Engine(EngineOptions options)
    : options_(std::move(options)), timers_(options_.wall_clock_breakdown) {}

Engine::~Engine() {
  // Why a host wait: the model's queued kernels may still use the device state freed below.
  if (exec_ != nullptr) (void)exec_->compute().synchronize();
  // Its copy streams belong to exec_'s backend (destroyed before it); it waits for its copies.
  offload_.reset();
  // The coordinator and reducer wait for their in-flight collectives; destroy them before the
  // communicator they use.
  params_.reset();
  grads_.reset();
  // The state store waits for in-flight swap I/O and removes its files.
  state_.reset();
}

namespace {

// bf16 models take bf16 GEMMs where the CPU has them natively, as torch does on this hardware;
// ZERO_CPU_BF16_GEMM=0 keeps the fp32 GEMMs (tests whose reference is an fp32-GEMM run).
bool use_bf16_gemm(DType dtype) {
  if (dtype != DType::kBF16) return false;
  const char* env = std::getenv("ZERO_CPU_BF16_GEMM");
  if (env != nullptr && std::strcmp(env, "0") == 0) return false;
  return kernels::cpu::Bf16Gemm::cpu_supported();
}

}  // namespace

namespace {

config::OffloadTarget target_of(OptimizerOffload o) {
  switch (o) {
    case OptimizerOffload::kNone: return config::OffloadTarget::kNone;
    case OptimizerOffload::kCpu: return config::OffloadTarget::kCpu;
    case OptimizerOffload::kNvme: return config::OffloadTarget::kNvme;
  }
  return config::OffloadTarget::kNone;
}

config::OffloadTarget target_of(sharding::ParamOffload o) {
  switch (o) {
    case sharding::ParamOffload::kNone: return config::OffloadTarget::kNone;
    case sharding::ParamOffload::kCpu: return config::OffloadTarget::kCpu;
    case sharding::ParamOffload::kNvme: return config::OffloadTarget::kNvme;
  }
  return config::OffloadTarget::kNone;
}

}  // namespace

config::ZeroPlacement zero_placement(const EngineOptions& o, int world_size) {
  config::ZeroPlacement p;
  p.stage = o.zero.stage;
  p.stage_text = std::to_string(o.zero.stage);
  p.optimizer_offload = target_of(o.offload.optimizer);
  p.param_offload = target_of(o.offload.param.device);
  p.optimizer_nvme_path = !o.offload.nvme_path.empty();
  p.param_nvme_path = !o.offload.param.nvme_path.empty();
  p.ratio = o.offload.ratio;
  p.lamb = o.optimizer.kind == optim::OptimizerKind::kLamb;
  p.world_size = world_size;
  p.bf16 = o.dtype == DType::kBF16;
  p.bf16_master_weights = o.state_dtypes.master == DType::kBF16;
  p.bf16_optimizer_states = o.state_dtypes.moments == DType::kBF16;
  return p;
}

StatusOr<std::vector<std::string>> sanitize_engine_options(EngineOptions& o, int world_size) {
  o.zero.model_dtype = o.dtype;
  o.transformer.bf16_gemm = use_bf16_gemm(o.dtype);
  const config::ZeroRules rules = config::apply_zero_rules(zero_placement(o, world_size));
  ZERO_RETURN_IF_ERROR(rules.first_error());
  OffloadOptions& off = o.offload;
  if (rules.optimizer_offload == config::OffloadTarget::kCpu)
    off.optimizer = OptimizerOffload::kCpu;
  if (rules.param_offload == config::OffloadTarget::kNone) {
    off.param.device = sharding::ParamOffload::kNone;
  }
  if (off.optimizer == OptimizerOffload::kNvme) {
    ZERO_RETURN_IF_ERROR(offload::validate_aio_config(off.aio).with_context("aio"));
  }
  if (off.param.device == sharding::ParamOffload::kNvme) {
    ZERO_RETURN_IF_ERROR(offload::validate_aio_config(off.param.aio).with_context("aio"));
  }
  return rules.warnings();
}

bool offload_overlaps_backward(const EngineOptions& o) {
  // A device model (the CPU backend counts when a model factory puts the model on its streams).
  const bool device_model = o.device != Device::kCpu || static_cast<bool>(o.model_factory);
  return device_model && o.offload.optimizer == OptimizerOffload::kCpu &&
         o.offload.param.device == sharding::ParamOffload::kNone &&
         o.optimizer.kind == optim::OptimizerKind::kAdam && o.offload_overlap &&
         o.gradient_clipping <= 0.0 && o.dtype != DType::kF16 && o.state_dtypes.fp32();
}

bool gradients_on_host(const EngineOptions& o, bool state_on_device) {
  return state_on_device && o.offload.optimizer != OptimizerOffload::kNone && o.zero.stage >= 2 &&
         o.offload_gradients;
}

// Engine::create's build steps, in order. Each fills in members the next ones read.
StatusOr<std::unique_ptr<Engine>> Engine::create(EngineOptions options, const UnitInitFn& init,
                                                 Communicator* comm) {
  std::unique_ptr<Engine> e(new Engine(std::move(options)));
  if (comm == nullptr) {
    e->own_comm_ = std::make_unique<SelfCommunicator>();
    comm = e->own_comm_.get();
  }
  e->comm_ = comm;
  ZERO_ASSIGN_OR_RETURN(std::vector<std::string> warnings,
                        sanitize_engine_options(e->options_, comm->world_size()));
  if (comm->rank() == 0) {
    for (const std::string& w : warnings) spdlog::warn("{}", w);
  }
  ZERO_RETURN_IF_ERROR(e->build_contexts_and_model());
  ZERO_ASSIGN_OR_RETURN(Communicator * zero_comm, e->build_placement());
  ZERO_RETURN_IF_ERROR(e->check_memory_fits());
  ZERO_RETURN_IF_ERROR(e->build_sharding(*zero_comm));
  ZERO_RETURN_IF_ERROR(e->build_optimizer_state(init));
  // Loss scaling exists only for fp16; bf16 and fp32 run at scale 1 (non-finite steps still skip).
  const EngineOptions& o = e->options_;
  e->scaler_ = std::make_unique<optim::LossScaler>(
      o.dtype == DType::kF16 ? o.loss_scaler : optim::LossScalerConfig{});
  return e;
}

Status Engine::build_contexts_and_model() {
  const EngineOptions& o = options_;
  device::StreamOptions inline_streams;
  inline_streams.inline_host = true;
  ZERO_ASSIGN_OR_RETURN(host_, device::ExecutionContext::create(Device::kCpu, inline_streams));
  overlap_stream_ = host_->backend().create_stream("overlap");
  if (o.device == Device::kCpu && !o.model_factory) {
    model_ = std::make_unique<model::Transformer>(o.model_config, o.transformer);
    return ok_status();
  }
  // One GPU per rank, shared when the node has fewer (rank_cuda_device).
  device::StreamOptions so;
  so.cuda_device =
      rank_cuda_device(*comm_, o.device == Device::kCuda ? probe_cuda().device_count : 0);
  ZERO_ASSIGN_OR_RETURN(exec_, device::ExecutionContext::create(o.device, so));
  // wall_clock_breakdown on a GPU: the phases' kernels timed by events on the compute stream.
  if (exec_->device() == Device::kCuda)
    timers_.use_device_clock(exec_->backend(), exec_->compute());
  const ModelFactory& factory = o.model_factory ? o.model_factory : make_device_model;
  ZERO_ASSIGN_OR_RETURN(model_, factory(o.model_config, o.transformer, *exec_));
  ZERO_CHECK(model_->device() == exec_->device(), "the model factory made a ",
             device_name(model_->device()), " model for a ", device_name(exec_->device()),
             " context");
  return ok_status();
}

StatusOr<Communicator*> Engine::build_placement() {
  shard_layout_ =
      std::make_unique<sharding::ShardLayout>(model_->layout(), comm_->world_size(), comm_->rank());
  state_device_ = choose_state_device(comm_->world_size());
  Communicator* zero_comm = comm_;  // what the coordinator and reducer run their collectives on
  if (state_device_ != nullptr && comm_->world_size() > 1) {
    // Collective: every rank decides alike (the same options, the same build).
    const int device_count = exec_->device() == Device::kCuda ? probe_cuda().device_count : 0;
    StatusOr<std::unique_ptr<Communicator>> dc =
        make_device_communicator(*comm_, *exec_, options_.dist_backend, device_count);
    if (dc.ok()) {
      device_comm_ = std::move(*dc);
      if (device_comm_ != nullptr) zero_comm = device_comm_.get();
    } else if (dc.status().code() == StatusCode::kUnimplemented) {
      state_device_ = nullptr;  // no collectives on device memory in this build: staging
    } else {
      return dc.status().with_context(fmt::format("rank {}", comm_->rank()));
    }
  }
  return zero_comm;
}

Status Engine::check_memory_fits() const {
  const EngineOptions& o = options_;
  if (!o.check_memory) return ok_status();
  // Why before any allocation: a shortfall must be a message naming the setting to change, not
  // the kernel's OOM killer halfway through loading the model.
  MemoryNeeds needs = plan_memory(o, *shard_layout_, o.planned_micro_batch, o.planned_seq_len);
  // The host plan leaves out the state kept on the device (the device plan counts it); an
  // offloaded optimizer's master weights and moments stay in the host plan.
  const bool offloaded = o.offload.optimizer != OptimizerOffload::kNone;
  if (state_device_ != nullptr && state_device_->device() != Device::kCpu) {
    // offload_param keeps the stage-3 shards in host memory (their NVMe staging included).
    needs.parameters =
        o.offload.param.device != sharding::ParamOffload::kNone ? needs.param_shards : 0;
    // Host gradients: this rank's fp32 partitions, page-locked (the device holds the buckets).
    needs.gradients = runtime::gradients_on_host(o, true) ? needs.gradient_partitions : 0;
    if (!offloaded) needs.master_weights = needs.optimizer_state = 0;
  }
  // No OffloadPipeline on the staging path (choose_state_device declined, or no collectives on
  // device memory in this build).
  if (state_device_ == nullptr || !offloaded) needs.offload_buffers = 0;
  const HostResources have = o.resources ? *o.resources : probe_host_resources();
  Status fits = check_memory(needs, comm_->local_world_size(), have);
  std::optional<DevicePlan> device_plan;
  if (fits.ok() && exec_ != nullptr && exec_->device() != Device::kCpu) {
    StatusOr<DevicePlan> plan =
        plan_device_memory(o, *shard_layout_, *exec_, state_device_ != nullptr);
    fits = plan.ok() ? check_device_memory(plan->needs, plan->have) : plan.status();
    if (plan.ok()) device_plan = std::move(*plan);
  }
  if (!fits.ok()) return fits.with_context(fmt::format("rank {}", comm_->rank()));
  if (o.on_memory_plan && comm_->rank() == 0) {
    o.on_memory_plan(describe_memory_plan(needs, comm_->local_world_size(), have,
                                          device_plan ? &*device_plan : nullptr));
  }
  return ok_status();
}

Status Engine::build_sharding(Communicator& zero_comm) {
  const EngineOptions& o = options_;
  ZERO_ASSIGN_OR_RETURN(
      params_, sharding::ParamCoordinator::create(*shard_layout_, zero_comm, o.zero,
                                                  o.offload.param, memory_, state_device_));
  if (const sharding::ParamStore* store = params_->store();
      store != nullptr && !store->pin_warning().empty() && comm_->rank() == 0) {
    spdlog::warn(
        "zero_optimization.offload_param.pin_memory: parameter shards stay pageable: {} (raise "
        "`ulimit -l` to pin them)",
        store->pin_warning());
  }
  sharding::ZeroOptions zero = o.zero;
  zero.grads_on_host = runtime::gradients_on_host(o, state_device_ != nullptr);
  ZERO_ASSIGN_OR_RETURN(grads_, sharding::GradReducer::create(*shard_layout_, zero_comm, zero,
                                                              memory_, state_device_));
  if (exec_ != nullptr && state_device_ == nullptr) {
    const model::ModelLayout& layout = model_->layout();
    staged_params_ = std::make_unique<StagedParams>(*params_, *exec_, layout.num_units());
    staged_grads_ = std::make_unique<StagedGrads>(*grads_, *exec_, layout);
  }
  return ok_status();
}

Status Engine::build_optimizer_state(const UnitInitFn& init) {
  // Master weights and optimizer state: this rank's partition only (the full unit at stage 0),
  // wherever offload_optimizer puts them.
  const model::ModelLayout& layout = model_->layout();
  const int num_units = layout.num_units();
  std::vector<int64_t> partition_numels(static_cast<size_t>(num_units));
  int64_t max_partition_numel = 0;
  for (int u = 0; u < num_units; ++u) {
    partition_numels[static_cast<size_t>(u)] = partition_numel(u);
    max_partition_numel = std::max(max_partition_numel, partition_numel(u));
  }
  // ZeRO-Offload with the rest of the state on the device: the store keeps master weights and
  // moments in host memory (or NVMe), the pipeline moves gradients and new weights across.
  const OffloadOptions& off = options_.offload;
  const bool offload_on_device =
      state_device_ != nullptr && off.optimizer != OptimizerOffload::kNone;
  if (offload_on_device) {
    ZERO_ASSIGN_OR_RETURN(offload_, OffloadPipeline::create(*state_device_, max_partition_numel,
                                                            options_.dtype, memory_));
  }
  if (options_.state_dtypes.master != DType::kF32 && !offload_on_device &&
      state_device_ == nullptr) {
    // install_fn widens a bf16 master for the host coordinator.
    memory_.master_bytes += max_partition_numel * static_cast<int64_t>(sizeof(float));
  }
  auto fill = [this, &init, &layout](int u, float* master) {
    const int64_t begin = partition_begin(u);
    return init(u, begin, begin + partition_numel(u), master)
        .with_context(fmt::format("initialising unit {}", layout.unit(u).name));
  };
  ZERO_ASSIGN_OR_RETURN(
      state_, OptimizerStateStore::create(
                  off, std::move(partition_numels), comm_->rank(), memory_, fill, install_fn(),
                  offload_on_device ? nullptr : state_device_, options_.state_dtypes));
  if (offload_ != nullptr) {
    ZERO_RETURN_IF_ERROR(offload_->finish());
    setup_overlap();
  }
  return params_->finish_updates();
}

device::ExecutionContext* Engine::choose_state_device(int world_size) const {
  // The device path covers what the device-resident coordinator, reducer and store do today:
  // Adam(W) (the backend's fused update, or the CPU Adam when offloaded; Lamb's trust ratio runs
  // on the host), with nothing offloaded or with offload_optimizer (cpu / nvme): then the
  // gradients stay on the device and the OffloadPipeline moves each unit's gradient to the host
  // state (and, without offload_param, its new weights back). With offload_param (stage 3 only,
  // config::apply_zero_rules) the stage-3 shards live in page-locked host memory (or NVMe): the
  // coordinator copies a unit's shard to the device on its copy stream before gathering it there,
  // and the new values back after the update (ZeRO-Infinity, sharding/param_coordinator.h), so
  // the device holds gather buffers, not the model. Several ranks also need a communicator on
  // device memory (create()). The rest (Lamb) takes the staging path.
  if (exec_ == nullptr) return nullptr;
  if (options_.optimizer.kind != optim::OptimizerKind::kAdam) return nullptr;
  return exec_.get();
}

device::ExecutionContext& Engine::grads_ctx() const {
  return state_device_ != nullptr ? *state_device_ : *host_;
}

device::ExecutionContext& Engine::state_ctx() const {
  return state_->on_device() ? *state_device_ : *host_;
}

void Engine::setup_overlap() {
  // The CPU Adam of a unit can start as soon as its gradient is final when the update depends on
  // that gradient alone: no clipping (the global norm scales every unit), no loss scale (fp16's
  // unscaling and overflow skip), the state in RAM (NVMe units stream in the store's order).
  // bf16 / fp32 steps still skip on a non-finite gradient: the units updated early are restored
  // from the pipeline's rollback copy then (host memory: 12 bytes per element of this rank's
  // partition).
  overlap_adam_ = offload_overlaps_backward(options_) && !state_->on_nvme();
  if (!overlap_adam_) return;
  std::vector<int64_t> numels(static_cast<size_t>(shard_layout_->num_units()));
  for (size_t u = 0; u < numels.size(); ++u) numels[u] = partition_numel(static_cast<int>(u));
  const int64_t bytes = offload_->keep_rollback(numels);
  memory_.master_bytes += bytes / 3;
  memory_.optimizer_state_bytes += bytes - bytes / 3;
  grads_->set_on_partition_final([this](int u, device::Stream& ready) {
    if (offload_->overlapping() && grads_->partitions_on_host()) {
      // Already in host memory (written on `ready`, the reducer's copy stream): no download.
      offload_->partition_final_on_host(u, grads_->partition(u), ready);
    } else if (offload_->overlapping()) {
      offload_->partition_final(u,
                                TensorView{const_cast<float*>(grads_->partition(u)), DType::kF32,
                                           Shape{partition_numel(u)}, state_device_->device()},
                                ready);
    }
  });
}

void Engine::begin_overlapped_update() {
  // This step's update, known before backward: the next successful update's number, rate and
  // betas (what apply_update would use), and grad multiplier 1 (no clipping, scale 1).
  const int64_t step = optimizer_updates_ + 1;
  overlap_lr_ = options_.schedule.next_lr();
  const double lr = overlap_lr_;
  const std::optional<optim::Betas> betas = options_.schedule.betas_at(step);
  // The worker is not an OpenMP thread of this one: it gets this thread's team size (the rank's
  // share of the cores), not the process default.
  const int threads = omp_get_max_threads();
  offload_->begin_overlap([this, step, lr, betas, threads](int u, const float* grad) {
    omp_set_num_threads(threads);
    // The rollback copy is written by the CPU Adam in the same pass (it reads the old values
    // anyway): three more streamed writes, not a second sweep. As separate single-threaded
    // memcpys it cost gpt2-1558m 2.7 s a step on an H200 host (bench/results/gpu_verify_stop23.md).
    UnitUpdateOutputs keep;
    keep.prev_master = offload_->rollback_copy(u, 0);
    keep.prev_exp_avg = offload_->rollback_copy(u, 1);
    keep.prev_exp_avg_sq = offload_->rollback_copy(u, 2);
    update_unit(u, lr, 1.0f, betas, step, grad, state_->ram_refs(u), keep, overlap_stream_.get());
  });
}

void Engine::roll_back_overlapped_update() {
  for (int u : offload_->end_overlap()) {
    const OptimizerStateStore::RamState st = state_->ram_state(u);
    offload_->restore_rollback(u, st.master, st.exp_avg, st.exp_avg_sq);
    ++rolled_back_units_;
  }
}

OptimizerStateStore::InstallFn Engine::install_fn() {
  if (offload_ != nullptr && params_->params_offloaded()) {
    // Host master weights and host shards (offload_optimizer with offload_param): rounded on the
    // host into the shard (a bf16 master copied), no copy to the device and back.
    return [this](int u, const TensorView& master) { return params_->set_host_values(u, master); };
  }
  if (offload_ != nullptr) {
    // Host master weights: rounded to the model dtype into a pinned upload slot (a bf16 master is
    // already the bf16 model's values), copied to the device and installed there as they are.
    return [this](int u, const TensorView& master) {
      return offload_->upload(master, [this, u](const void* device_values) {
        return params_->set_model_dtype_values(u, device_values);
      });
    };
  }
  return [this](int u, const TensorView& master) {
    if (master.dtype == DType::kF32) return params_->set_values(u, master.as<const float>());
    // A bf16 master (a bf16 model: config::apply_zero_rules): on a device, the model's values
    // as they are; in host memory widened for set_values, which rounds them back exactly.
    if (state_device_ != nullptr) return params_->set_model_dtype_values(u, master.data);
    install_f32_.resize(static_cast<size_t>(std::max<int64_t>(master.numel(), 1)));
    convert_to_f32(master.data, master.dtype, install_f32_.data(),
                   static_cast<size_t>(master.numel()));
    return params_->set_values(u, install_f32_.data());
  };
}

model::ParamAccess& Engine::params() { return *params_; }

model::ParamAccess& Engine::model_params() {
  if (staged_params_ != nullptr) return *staged_params_;
  return *params_;
}

model::GradSink& Engine::model_grads() {
  if (staged_grads_ != nullptr) return *staged_grads_;
  return *grads_;
}

int64_t Engine::staging_device_bytes() const {
  if (staged_params_ == nullptr) return 0;
  return staged_params_->device_bytes() + staged_grads_->device_bytes();
}

StatusOr<StepResult> Engine::train_step(const std::vector<MicroBatch>& micro_batches) {
  ZERO_CHECK(!micro_batches.empty(), "train_step needs at least one micro-batch");
  StepResult r;
  r.loss_scale = scaler_->scale();
  for (const auto& mb : micro_batches) r.tokens += mb.batch * mb.seq * comm_->world_size();

  // A step that fails half-way waits for the overlapped updates it started and undoes them.
  struct SettleOverlap {
    Engine* engine;
    ~SettleOverlap() {
      if (engine->offload_ != nullptr && engine->offload_->overlapping()) {
        engine->roll_back_overlapped_update();
      }
    }
  } settle{this};
  ZERO_ASSIGN_OR_RETURN(r.loss, forward_backward(micro_batches, static_cast<float>(r.loss_scale)));
  {
    StepTimers::Scope t(timers_, StepPhase::kBackwardAllreduce);
    ZERO_RETURN_IF_ERROR(grads_->finish_step());
  }
  StepTimers::Scope step_timer(timers_, StepPhase::kStep);
  timers_.end_step();

  double norm_scaled = 0.0;
  bool overflow = false;
  ZERO_RETURN_IF_ERROR(global_norm(&norm_scaled, &overflow));
  const optim::GradScaling scaling =
      optim::grad_scaling(norm_scaled, r.loss_scale, options_.gradient_clipping);
  overflow = overflow || !scaling.finite;
  r.grad_norm = overflow ? std::nan("") : scaling.grad_norm;
  ++global_step_;

  ZERO_ASSIGN_OR_RETURN(optim::LossScaleUpdate scale_update, scaler_->update(overflow));
  if (overflow) {
    // The step is skipped without touching master weights, moments or the schedule.
    r.skipped = true;
    if (offload_ != nullptr && offload_->overlapping()) roll_back_overlapped_update();
    if (comm_->rank() == 0) {
      spdlog::warn("{}", optim::overflow_log_line(0, scaler_->config().mode, scale_update));
    }
    return r;
  }
  r.lr = options_.schedule.next_lr();
  ZERO_RETURN_IF_ERROR(apply_update(r.lr, scaling.grad_multiplier));
  options_.schedule.on_successful_update();
  return r;
}

StatusOr<double> Engine::forward_backward(const std::vector<MicroBatch>& micro_batches,
                                          float loss_scale) {
  // DeepSpeed scales each micro-step's loss by 1/GAS and averages gradients over ranks; here the
  // per-token gradient carries both (and the loss scale), so reductions are plain sums.
  const int gas = static_cast<int>(micro_batches.size());
  const double world = static_cast<double>(comm_->world_size());
  grads_->begin_step(gas);
  if (overlap_adam_) begin_overlapped_update();
  double global_targets = 0.0;  // mean_over_global_targets: unmasked targets of the global batch
  if (options_.mean_over_global_targets) {
    ZERO_ASSIGN_OR_RETURN(global_targets, count_global_targets(micro_batches));
  }
  double loss_sum = 0.0;
  for (int m = 0; m < gas; ++m) {
    const MicroBatch& mb = micro_batches[static_cast<size_t>(m)];
    params_->begin_micro_step(/*another_follows=*/m + 1 < gas);
    grads_->begin_micro_step(m);
    double mean_loss = 0.0;  // over this micro-batch's counted targets
    {
      StepTimers::Scope t(timers_, StepPhase::kForward);
      mean_loss =
          model_->forward(model_params(), mb.tokens.data(), mb.targets.data(), mb.batch, mb.seq);
    }
    const int64_t counted = model_->counted_targets();
    double dloss = counted > 0 ? loss_scale / (static_cast<double>(counted) * gas * world) : 0.0;
    double weight = 1.0;  // of this micro-step's mean in the mean over micro-steps and ranks
    if (options_.mean_over_global_targets) {
      // Reweighed so that the mean over micro-steps and ranks below is the mean over all targets
      // (weight exactly 1 when every micro-batch counts the same).
      weight =
          global_targets > 0 ? static_cast<double>(counted) * gas * world / global_targets : 0.0;
      dloss = global_targets > 0 ? loss_scale / global_targets : 0.0;
    }
    loss_sum += weight * mean_loss;
    {
      StepTimers::Scope t(timers_, StepPhase::kBackwardInner);
      model_->backward(model_params(), model_grads(), static_cast<float>(dloss));
    }
    ZERO_RETURN_IF_ERROR(params_->status());
    if (staged_grads_ != nullptr) ZERO_RETURN_IF_ERROR(staged_grads_->status());
  }
  // The loss of the global batch: mean over this rank's micro-steps, then over ranks.
  float loss = static_cast<float>(loss_sum / gas);
  ZERO_RETURN_IF_ERROR(comm_->all_reduce(&loss, 1, DType::kF32, ReduceOp::kSum));
  return static_cast<double>(loss) / world;
}

StatusOr<double> Engine::count_global_targets(const std::vector<MicroBatch>& micro_batches) {
  int64_t local = 0;
  for (const MicroBatch& mb : micro_batches) {
    for (int32_t t : mb.targets) local += (t != kernels::cpu::kIgnoreIndex);
  }
  // Why a collective before the first backward: every rank scales its gradients by the global
  // count. fp32 holds integers exactly only below 2^24, so the count travels as two 12-bit-split
  // parts (exact up to 2^36 targets per step and 4096 ranks).
  float parts[2] = {static_cast<float>(local >> 12), static_cast<float>(local & 0xFFF)};
  ZERO_RETURN_IF_ERROR(comm_->all_reduce(parts, 2, DType::kF32, ReduceOp::kSum));
  return static_cast<double>(parts[0]) * 4096.0 + static_cast<double>(parts[1]);
}

StatusOr<LossSum> Engine::eval_loss(const std::vector<MicroBatch>& micro_batches) {
  ZERO_ASSIGN_OR_RETURN(LossSum local, forward_loss_sum(
                                           *model_, model_params(), micro_batches,
                                           [this] { params_->begin_micro_step(); },
                                           [this] { return params_->status(); }));
  return all_reduce_loss_sum(*comm_, local);
}

Status Engine::global_norm(double* norm_scaled, bool* nonfinite) {
  // Each rank sums squares over the real elements of its own shard of every unit (its partition at
  // stages 1–3; the matching slice of the full gradient at stage 0), so every element counts once.
  device::ExecutionContext& ctx = grads_ctx();
  if (grads_->partitions_on_host()) return global_norm_on_host(norm_scaled, nonfinite);
  device::SumSquaresOut out;
  for (int u = 0; u < shard_layout_->num_units(); ++u) {
    const int64_t skip = shard_layout_->shard_begin(u) - grads_->partition_begin(u);
    const int64_t n = shard_layout_->shard_data_numel(u, comm_->rank());
    ctx.backend().sum_squares(ctx.compute(),
                              TensorView{const_cast<float*>(grads_->partition(u) + skip),
                                         DType::kF32, Shape{n}, ctx.device()},
                              &out);
  }
  // Why a host wait (the step's one): the clipping factor and the skip decision are host scalars.
  // It also reports the first failed kernel or copy of the step; the reducer's collectives are
  // waited for first, with their timeouts (a dead peer is an error, not a hang). In host memory
  // both are already done (inline streams, a reducer that finished its collectives).
  ZERO_RETURN_IF_ERROR(grads_->wait_collectives());
  ZERO_RETURN_IF_ERROR(ctx.compute().synchronize());
  const double sum_sq = out.sum_sq;
  const bool bad = out.nonfinite;
  float buf[2] = {static_cast<float>(sum_sq), bad ? 1.0f : 0.0f};
  ZERO_RETURN_IF_ERROR(comm_->all_reduce(buf, 2, DType::kF32, ReduceOp::kSum));
  *nonfinite = buf[1] > 0.0f || !std::isfinite(buf[0]);
  *norm_scaled = std::sqrt(static_cast<double>(buf[0]));
  return ok_status();
}

Status Engine::global_norm_on_host(double* norm_scaled, bool* nonfinite) {
  // Why host waits (the step's one, as on the device): the clipping factor and the skip decision
  // are host scalars, here summed from the per-unit totals the copy stream's sums of squares
  // wrote; its wait also reports a failed copy, and the compute stream's the step's kernels.
  ZERO_RETURN_IF_ERROR(grads_->wait_collectives());
  ZERO_RETURN_IF_ERROR(grads_->wait_host_copies());
  ZERO_RETURN_IF_ERROR(grads_ctx().compute().synchronize());
  // The same additions, in the same order, as one SumSquaresOut over the units would make.
  double sum_sq = 0.0;
  bool bad = false;
  for (int u = 0; u < shard_layout_->num_units(); ++u) {
    const device::SumSquaresOut& part = grads_->partition_sum_squares(u);
    sum_sq += part.sum_sq;
    bad = bad || part.nonfinite;
  }
  float buf[2] = {static_cast<float>(sum_sq), bad ? 1.0f : 0.0f};
  ZERO_RETURN_IF_ERROR(comm_->all_reduce(buf, 2, DType::kF32, ReduceOp::kSum));
  *nonfinite = buf[1] > 0.0f || !std::isfinite(buf[0]);
  *norm_scaled = std::sqrt(static_cast<double>(buf[0]));
  return ok_status();
}

namespace {

// Elements [offset, offset + numel) of a flat view.
TensorView slice(const TensorView& v, int64_t offset, int64_t numel) {
  return TensorView{
      static_cast<char*>(v.data) + offset * static_cast<int64_t>(dtype_bytes(v.dtype)), v.dtype,
      Shape{numel}, v.device};
}

// Master weights [offset, offset + numel) in the model dtype into `dst`: rounded from fp32, or
// copied from a bf16 master (whose model is bf16: config::apply_zero_rules).
void round_master(const TensorView& master, int64_t offset, int64_t numel, void* dst,
                  DType model_dtype) {
  if (numel <= 0) return;
  const TensorView src = slice(master, offset, numel);
  if (master.dtype == DType::kF32) {
    kernels::cpu::cast_from_f32(static_cast<const float*>(src.data), dst, model_dtype, numel);
    return;
  }
  ZERO_CHECK(master.dtype == model_dtype, "a ", dtype_name(master.dtype), " master for a ",
             dtype_name(model_dtype), " model");
  std::memcpy(dst, src.data, src.nbytes());
}

}  // namespace

void Engine::update_unit(int u, double lr, float grad_multiplier,
                         const std::optional<optim::Betas>& betas, int64_t step, const float* grad,
                         const OptimizerStateStore::StateRefs& state,
                         const UnitUpdateOutputs& outputs, device::Stream* stream) {
  const optim::OptimizerSpec& spec = options_.optimizer;
  const int64_t pbegin = grads_->partition_begin(u), pend = pbegin + grads_->partition_numel(u);
  const bool prev = outputs.prev_master != nullptr;
  ZERO_CHECK((!prev && outputs.master_rounded == nullptr) ||
                 (spec.kind == optim::OptimizerKind::kAdam && !state_->on_device()),
             "update_unit: outputs of the host Adam asked for another update");
  ZERO_CHECK(outputs.master_rounded == nullptr || options_.dtype != DType::kF32,
             "update_unit: a rounded master needs a 16-bit model");
  const int64_t pnumel = pend - pbegin;
  const size_t rounded_bytes = dtype_bytes(options_.dtype);
  auto* rounded = static_cast<char*>(outputs.master_rounded);
  int64_t rounded_upto = 0;  // partition elements [0, rounded_upto) of master_rounded written
  // Where the state lives: the device's fused AdamW queued on its compute stream after the
  // gradient ops, or the vectorised CPU Adam (DeepSpeedCPUAdam's role) in host memory, run at once
  // on the inline host stream (bitwise the scalar optim::adam_update either way; fp32 or bf16
  // state, as the views' dtypes say).
  device::ExecutionContext& ctx = state_ctx();
  // Each parameter's piece inside the partition, with its own weight-decay group.
  for (const auto& p : model_->layout().unit(u).params) {
    const int64_t lo = std::max(pbegin, p.offset), hi = std::min(pend, p.offset + p.numel());
    if (lo >= hi) continue;
    const int64_t at = lo - pbegin, numel = hi - lo;
    const double wd = model::decays(p.kind) ? spec.weight_decay : 0.0;
    device::AdamShardViews views;
    views.param = slice(state.master, at, numel);
    views.grad = slice(
        TensorView{const_cast<float*>(grad), DType::kF32, Shape{pnumel}, ctx.device()}, at, numel);
    views.exp_avg = slice(state.exp_avg, at, numel);
    views.exp_avg_sq = slice(state.exp_avg_sq, at, numel);
    if (prev) {
      auto host = [&](float* q) { return TensorView{q + at, DType::kF32, Shape{numel}}; };
      views.prev_param = host(outputs.prev_master);
      views.prev_exp_avg = host(outputs.prev_exp_avg);
      views.prev_exp_avg_sq = host(outputs.prev_exp_avg_sq);
    }
    if (rounded != nullptr) {
      // Elements no parameter covers (padding) are rounded as upload() would, before this piece.
      ZERO_CHECK(at >= rounded_upto, "update_unit: unit ", u,
                 "'s parameters are not in ascending order");
      round_master(state.master, rounded_upto, at - rounded_upto,
                   rounded + rounded_upto * rounded_bytes, options_.dtype);
      views.param_16bit = TensorView{rounded + at * rounded_bytes, options_.dtype, Shape{numel}};
      rounded_upto = hi - pbegin;
    }
    if (spec.kind == optim::OptimizerKind::kAdam) {
      optim::AdamArgs args = spec.adam_args(lr, step, wd);
      if (betas) {
        args.beta1 = static_cast<float>(betas->beta1);
        args.beta2 = static_cast<float>(betas->beta2);
      }
      ctx.backend().adamw(stream != nullptr ? *stream : ctx.compute(), args, views,
                          grad_multiplier);
    } else {
      optim::LambArgs args = spec.lamb_args(lr, step, wd);
      if (betas) {
        args.beta1 = static_cast<float>(betas->beta1);
        args.beta2 = static_cast<float>(betas->beta2);
      }
      // fp32 state only (config::apply_zero_rules refuses Lamb with a bf16 state).
      optim::AdamShard shard;
      shard.param = views.param.f32();
      shard.grad = views.grad.f32();
      shard.exp_avg = views.exp_avg.f32();
      shard.exp_avg_sq = views.exp_avg_sq.f32();
      shard.numel = numel;
      const int64_t offsets[2] = {0, numel};
      optim::lamb_update(args, shard, offsets, grad_multiplier);
    }
  }
  if (rounded != nullptr) {
    round_master(state.master, rounded_upto, pnumel - rounded_upto,
                 rounded + rounded_upto * rounded_bytes, options_.dtype);
  }
}

Status Engine::apply_update(double lr, float grad_multiplier) {
  ++optimizer_updates_;
  const std::optional<optim::Betas> betas = options_.schedule.betas_at(optimizer_updates_);
  if (offload_ != nullptr && offload_->overlapping()) {
    return apply_overlapped_update(lr, grad_multiplier, betas);
  }
  const bool host_grads = grads_->partitions_on_host();
  if (offload_ != nullptr && !host_grads) {
    // The device gradients to the host state, unit by unit in the store's order (ascending), the
    // next unit's copy in flight during this one's CPU Adam.
    std::vector<int> order(static_cast<size_t>(shard_layout_->num_units()));
    for (int u = 0; u < shard_layout_->num_units(); ++u) order[static_cast<size_t>(u)] = u;
    offload_->begin_downloads(std::move(order), [this](int u) {
      return TensorView{const_cast<float*>(grads_->partition(u)), DType::kF32,
                        Shape{partition_numel(u)}, state_device_->device()};
    });
  }
  Status updated = state_->update_all(
      [&](int u, const OptimizerStateStore::StateRefs& state) {
        if (offload_ == nullptr) {
          update_unit(u, lr, grad_multiplier, betas, optimizer_updates_, grads_->partition(u),
                      state);
          return;
        }
        // Host gradients are read where the reducer left them (the norm waited for their copies).
        const float* grad = host_grads ? grads_->partition(u) : offload_->host_grad(u);
        // A 16-bit model's new weights are rounded by the CPU Adam straight into the upload slot
        // that install_fn's upload() sends next (nullptr for fp32: upload() copies the master).
        // Offloaded parameters take the master on the host instead (install_fn).
        void* rounded =
            params_->params_offloaded() ? nullptr : offload_->next_upload_host(partition_numel(u));
        const auto t0 = std::chrono::steady_clock::now();
        update_unit(u, lr, grad_multiplier, betas, optimizer_updates_, grad, state,
                    UnitUpdateOutputs{.master_rounded = rounded});
        offload_->add_adam_ms(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
        if (!host_grads) offload_->release_grad(u);
      },
      install_fn());
  if (offload_ != nullptr) {
    Status copies = offload_->finish();
    if (updated.ok()) updated = std::move(copies);
  }
  ZERO_RETURN_IF_ERROR(updated);
  // Not a wait (the host streams are inline): the first error of the host ops of this update.
  ZERO_RETURN_IF_ERROR(host_->compute().synchronize());
  return params_->finish_updates();
}

Status Engine::apply_overlapped_update(double lr, float grad_multiplier,
                                       const std::optional<optim::Betas>& betas) {
  ZERO_CHECK(grad_multiplier == 1.0f && lr == overlap_lr_, "overlapped update: multiplier ",
             grad_multiplier, " lr ", lr, " (begun with 1 and ", overlap_lr_, ")");
  const int num_units = shard_layout_->num_units();
  std::vector<char> updated(static_cast<size_t>(num_units), 0);
  for (int u : offload_->end_overlap()) updated[static_cast<size_t>(u)] = 1;
  // Units whose partition was not handed over (none in practice: every unit's gradient becomes
  // final once per step) are updated here, as the post-backward path does.
  std::vector<int> rest;
  for (int u = 0; u < num_units; ++u) {
    if (!updated[static_cast<size_t>(u)]) rest.push_back(u);
  }
  if (!rest.empty() && grads_->partitions_on_host()) {
    for (int u : rest) {
      update_unit(u, lr, grad_multiplier, betas, optimizer_updates_, grads_->partition(u),
                  state_->ram_refs(u));
    }
  } else if (!rest.empty()) {
    offload_->begin_downloads(rest, [this](int u) {
      return TensorView{const_cast<float*>(grads_->partition(u)), DType::kF32,
                        Shape{partition_numel(u)}, state_device_->device()};
    });
    for (int u : rest) {
      update_unit(u, lr, grad_multiplier, betas, optimizer_updates_, offload_->host_grad(u),
                  state_->ram_refs(u));
      offload_->release_grad(u);
    }
  }
  // The new weights to the device, in unit order (set_values may start collectives).
  const OptimizerStateStore::InstallFn install = install_fn();
  Status s = ok_status();
  for (int u = 0; u < num_units && s.ok(); ++u) s = install(u, state_->ram_refs(u).master);
  Status copies = offload_->finish();
  if (s.ok()) s = std::move(copies);
  ZERO_RETURN_IF_ERROR(s);
  return params_->finish_updates();
}

Status Engine::read_partition_state(int u, float* master, float* exp_avg, float* exp_avg_sq) const {
  return state_->read_partition(u, master, exp_avg, exp_avg_sq);
}

Status Engine::restore(const RestoreState& state) {
  global_step_ = state.global_step;
  optimizer_updates_ = state.optimizer_updates;
  if (!state.schedule_state.is_null()) {
    ZERO_RETURN_IF_ERROR(options_.schedule.restore(state.schedule_state));
  }
  if (!state.loss_scaler_state.is_null()) {
    ZERO_RETURN_IF_ERROR(scaler_->restore(state.loss_scaler_state));
  }
  ZERO_RETURN_IF_ERROR(state_->load_all(
      [&](int u, float* master, float* exp_avg, float* exp_avg_sq) {
        const int64_t begin = partition_begin(u);
        return state.read_partition(u, begin, begin + partition_numel(u), master, exp_avg,
                                    exp_avg_sq);
      },
      install_fn()));
  if (offload_ != nullptr) ZERO_RETURN_IF_ERROR(offload_->finish());
  return params_->finish_updates();
}

}  // namespace zero::runtime
