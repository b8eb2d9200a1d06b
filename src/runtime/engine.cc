// The engine: train_step reads as its phases (docs/design.md §5).
#include "runtime/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "comm/self_communicator.h"
#include "kernels/norm/norm.h"
#include "model/param_layout.h"
#include "offload/cpu_adam.h"
#include "offload/nvme_swapper.h"
#include "optim/adam.h"
#include "optim/grad_clip.h"
#include "optim/lamb.h"

namespace zero::runtime {

Engine::Engine(EngineOptions options)
    : options_(std::move(options)), timers_(options_.wall_clock_breakdown) {}

Engine::~Engine() {
  // The coordinator and reducer wait for their in-flight collectives; destroy them before the
  // communicator they use.
  params_.reset();
  grads_.reset();
  // The swapper waits for in-flight I/O on the staging buffers and removes its files.
  swapper_.reset();
}

StatusOr<std::unique_ptr<Engine>> Engine::create(EngineOptions options, const UnitInitFn& init,
                                                 Communicator* comm) {
  std::unique_ptr<Engine> e(new Engine(std::move(options)));
  if (comm == nullptr) {
    e->own_comm_ = std::make_unique<SelfCommunicator>();
    comm = e->own_comm_.get();
  }
  e->comm_ = comm;
  EngineOptions& o = e->options_;
  o.zero.model_dtype = o.dtype;
  if (o.zero.stage < 0 || o.zero.stage > 3) {
    return invalid_argument("zero_optimization.stage: {} is not a ZeRO stage (0, 1, 2 or 3)",
                            o.zero.stage);
  }
  if (o.optimizer.kind == optim::OptimizerKind::kLamb && o.zero.stage >= 1 &&
      comm->world_size() > 1) {
    return unimplemented(
        "optimizer.type: Lamb with ZeRO stage {} across {} ranks is not supported (its per-tensor "
        "trust ratio needs whole tensors; use stage 0)",
        o.zero.stage, comm->world_size());
  }
  OffloadOptions& off = o.offload;
  if (off.optimizer != OptimizerOffload::kNone && o.zero.stage == 0) {
    return invalid_argument(
        "zero_optimization.offload_optimizer.device: optimizer offload needs ZeRO stage 1, 2 or 3 "
        "(zero_optimization.stage is 0)");
  }
  if (off.optimizer == OptimizerOffload::kNvme && o.zero.stage < 3) {
    if (comm->rank() == 0) {
      spdlog::warn(
          "zero_optimization.offload_optimizer.device: \"nvme\" is treated as \"cpu\" below ZeRO "
          "stage 3 (zero_optimization.stage is {}); DeepSpeed does the same",
          o.zero.stage);
    }
    off.optimizer = OptimizerOffload::kCpu;
  }
  if (off.optimizer == OptimizerOffload::kNvme) {
    if (off.nvme_path.empty()) {
      return invalid_argument(
          "zero_optimization.offload_optimizer.nvme_path: missing: required when "
          "zero_optimization.offload_optimizer.device is \"nvme\"");
    }
    ZERO_RETURN_IF_ERROR(offload::validate_aio_config(off.aio).with_context("aio"));
  }
  e->model_ = std::make_unique<model::Transformer>(o.model_config, o.transformer);
  const model::ModelLayout& layout = e->model_->layout();
  e->shard_layout_ =
      std::make_unique<sharding::ShardLayout>(layout, comm->world_size(), comm->rank());
  if (off.param.device != sharding::ParamOffload::kNone && o.zero.stage < 3) {
    if (comm->rank() == 0) {
      spdlog::warn(
          "zero_optimization.offload_param.device: parameter offload needs ZeRO stage 3 "
          "(zero_optimization.stage is {}); ignored, as DeepSpeed does",
          o.zero.stage);
    }
    off.param.device = sharding::ParamOffload::kNone;
  }
  if (off.param.device == sharding::ParamOffload::kNvme) {
    ZERO_RETURN_IF_ERROR(offload::validate_aio_config(off.param.aio).with_context("aio"));
  }
  if (o.check_memory) {
    // Why before any allocation: a shortfall must be a message naming the setting to change,
    // not the kernel's OOM killer halfway through loading the model.
    const MemoryNeeds needs =
        plan_memory(o, *e->shard_layout_, o.planned_micro_batch, o.planned_seq_len);
    const HostResources have = o.resources ? *o.resources : probe_host_resources();
    Status fits = check_memory(needs, comm->local_world_size(), have);
    if (!fits.ok()) return fits.with_context(fmt::format("rank {}", comm->rank()));
  }
  ZERO_ASSIGN_OR_RETURN(e->params_, sharding::ParamCoordinator::create(
                                        *e->shard_layout_, *comm, o.zero, off.param, e->memory_));
  if (const sharding::ParamStore* store = e->params_->store();
      store != nullptr && !store->pin_warning().empty() && comm->rank() == 0) {
    spdlog::warn(
        "zero_optimization.offload_param.pin_memory: parameter shards stay pageable: {} (raise "
        "`ulimit -l` to pin them)",
        store->pin_warning());
  }
  e->grads_ = std::make_unique<sharding::GradReducer>(*e->shard_layout_, *comm, o.zero, e->memory_);

  // Master weights and optimizer state: this rank's partition only (the full unit at stage 0).
  // offload_optimizer.ratio picks which units the offloaded optimizer owns (a prefix).
  const int num_units = layout.num_units();
  if (!(off.ratio >= 0.0 && off.ratio <= 1.0)) {
    return invalid_argument("zero_optimization.offload_optimizer.ratio: {} is not in [0, 1]",
                            off.ratio);
  }
  e->offloaded_units_ = off.optimizer == OptimizerOffload::kNone
                            ? 0
                            : static_cast<int>(off.ratio * static_cast<double>(num_units));
  e->units_.resize(static_cast<size_t>(num_units));
  for (int u = 0; u < num_units; ++u) {
    e->units_[static_cast<size_t>(u)].on_nvme =
        off.optimizer == OptimizerOffload::kNvme && u < e->offloaded_units_;
  }
  if (e->offloaded_units_ > 0 && off.optimizer == OptimizerOffload::kNvme) {
    // Each unit's initial state goes through a staging set straight into the swap files.
    ZERO_RETURN_IF_ERROR(e->setup_nvme());
    Staging& st = e->staging_[0];
    for (int u = 0; u < e->offloaded_units_; ++u) {
      const int64_t begin = e->partition_begin(u), numel = e->partition_numel(u);
      ZERO_RETURN_IF_ERROR(
          init(u, begin, begin + numel, st.master.get())
              .with_context(fmt::format("initialising unit {}", layout.unit(u).name)));
      ZERO_RETURN_IF_ERROR(e->params_->set_values(u, st.master.get()));
      std::memset(st.exp_avg.get(), 0, static_cast<size_t>(numel) * sizeof(float));
      std::memset(st.exp_avg_sq.get(), 0, static_cast<size_t>(numel) * sizeof(float));
      // fast_init: the moments are zero and the preallocated files already read back as zeros.
      ZERO_RETURN_IF_ERROR(e->submit_swap(u, st, /*write=*/true, /*master_only=*/off.fast_init));
      ZERO_RETURN_IF_ERROR(wait_tickets(*e->swapper_, &st.writes));
    }
  }
  {
    for (int u = 0; u < num_units; ++u) {
      UnitState& s = e->units_[static_cast<size_t>(u)];
      if (s.on_nvme) continue;
      const int64_t begin = e->partition_begin(u), numel = e->partition_numel(u);
      s.master = Tensor(Shape{numel});
      s.exp_avg = Tensor(Shape{numel});
      s.exp_avg_sq = Tensor(Shape{numel});
      e->memory_.master_bytes += static_cast<int64_t>(s.master.nbytes());
      e->memory_.optimizer_state_bytes += static_cast<int64_t>(2 * s.exp_avg.nbytes());
      ZERO_RETURN_IF_ERROR(
          init(u, begin, begin + numel, s.master.f32())
              .with_context(fmt::format("initialising unit {}", layout.unit(u).name)));
      ZERO_RETURN_IF_ERROR(e->params_->set_values(u, s.master.f32()));
    }
  }
  ZERO_RETURN_IF_ERROR(e->params_->finish_updates());
  if (off.pin_memory && e->offloaded_units_ > 0) ZERO_RETURN_IF_ERROR(e->pin_offloaded_state());

  // Loss scaling exists only for fp16; bf16 and fp32 run at scale 1 (non-finite steps still skip).
  const bool fp16 = o.dtype == DType::kF16;
  e->scaler_ =
      std::make_unique<optim::LossScaler>(fp16 ? o.loss_scaler : optim::LossScalerConfig{});
  return e;
}

Status Engine::pin_offloaded_state() {
  std::string why_not;
  auto pin = [&](void* data, size_t nbytes) {
    if (data == nullptr || nbytes == 0) return;
    pins_.emplace_back(data, nbytes);
    if (!pins_.back().pinned() && why_not.empty()) why_not = pins_.back().why_not();
    memory_.pinned_bytes += static_cast<int64_t>(pins_.back().nbytes());
  };
  for (int u = 0; u < offloaded_units_; ++u) {
    UnitState& s = units_[static_cast<size_t>(u)];
    if (s.on_nvme) continue;
    pin(s.master.view().data, s.master.nbytes());
    pin(s.exp_avg.view().data, s.exp_avg.nbytes());
    pin(s.exp_avg_sq.view().data, s.exp_avg_sq.nbytes());
  }
  for (Staging& st : staging_) {
    const size_t bytes = offload::NvmeSwapper::slot_bytes(staging_numel_ * sizeof(float));
    pin(st.master.get(), bytes);
    pin(st.exp_avg.get(), bytes);
    pin(st.exp_avg_sq.get(), bytes);
  }
  if (!why_not.empty() && comm_->rank() == 0) {
    spdlog::warn(
        "zero_optimization.offload_optimizer.pin_memory: the offloaded optimizer state stays "
        "pageable: {} (raise `ulimit -l` to pin it)",
        why_not);
  }
  return ok_status();
}

model::ParamAccess& Engine::params() { return *params_; }

StatusOr<StepResult> Engine::train_step(const std::vector<MicroBatch>& micro_batches) {
  ZERO_CHECK(!micro_batches.empty(), "train_step needs at least one micro-batch");
  StepResult r;
  r.loss_scale = scaler_->scale();
  for (const auto& mb : micro_batches) r.tokens += mb.batch * mb.seq * comm_->world_size();

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
  double loss_sum = 0.0;
  for (int m = 0; m < gas; ++m) {
    const MicroBatch& mb = micro_batches[static_cast<size_t>(m)];
    params_->begin_micro_step();
    grads_->begin_micro_step(m);
    {
      StepTimers::Scope t(timers_, StepPhase::kForward);
      loss_sum += model_->forward(*params_, mb.tokens.data(), mb.targets.data(), mb.batch, mb.seq);
    }
    const int64_t counted = model_->counted_targets();
    const double dloss =
        counted > 0 ? loss_scale / (static_cast<double>(counted) * gas * world) : 0.0;
    {
      StepTimers::Scope t(timers_, StepPhase::kBackwardInner);
      model_->backward(*params_, *grads_, static_cast<float>(dloss));
    }
    ZERO_RETURN_IF_ERROR(params_->status());
  }
  // The loss of the global batch: mean over this rank's micro-steps, then over ranks.
  float loss = static_cast<float>(loss_sum / gas);
  ZERO_RETURN_IF_ERROR(comm_->all_reduce(&loss, 1, DType::kF32, ReduceOp::kSum));
  return static_cast<double>(loss) / world;
}

Status Engine::global_norm(double* norm_scaled, bool* nonfinite) {
  // Each rank sums squares over the real elements of its own shard of every unit (its partition at
  // stages 1–3; the matching slice of the full gradient at stage 0), so every element counts once.
  double sum_sq = 0.0;
  bool bad = false;
  for (int u = 0; u < shard_layout_->num_units(); ++u) {
    const int64_t skip = shard_layout_->shard_begin(u) - grads_->partition_begin(u);
    const int64_t n = shard_layout_->shard_data_numel(u, comm_->rank());
    kernels::cpu::SumSquares part = kernels::cpu::sum_squares(grads_->partition(u) + skip, n);
    sum_sq += part.sum_sq;
    bad = bad || part.nonfinite;
  }
  float buf[2] = {static_cast<float>(sum_sq), bad ? 1.0f : 0.0f};
  ZERO_RETURN_IF_ERROR(comm_->all_reduce(buf, 2, DType::kF32, ReduceOp::kSum));
  *nonfinite = buf[1] > 0.0f || !std::isfinite(buf[0]);
  *norm_scaled = std::sqrt(static_cast<double>(buf[0]));
  return ok_status();
}

void Engine::update_unit(int u, double lr, float grad_multiplier,
                         const std::optional<optim::Betas>& betas, float* master, float* exp_avg,
                         float* exp_avg_sq) {
  const optim::OptimizerSpec& spec = options_.optimizer;
  const int64_t pbegin = grads_->partition_begin(u), pend = pbegin + grads_->partition_numel(u);
  const float* grad = grads_->partition(u);
  // Each parameter's piece inside the partition, with its own weight-decay group.
  for (const auto& p : model_->layout().unit(u).params) {
    const int64_t lo = std::max(pbegin, p.offset), hi = std::min(pend, p.offset + p.numel());
    if (lo >= hi) continue;
    const double wd = model::decays(p.kind) ? spec.weight_decay : 0.0;
    optim::AdamShard shard;
    shard.param = master + (lo - pbegin);
    shard.grad = grad + (lo - pbegin);
    shard.exp_avg = exp_avg + (lo - pbegin);
    shard.exp_avg_sq = exp_avg_sq + (lo - pbegin);
    shard.numel = hi - lo;
    if (spec.kind == optim::OptimizerKind::kAdam) {
      optim::AdamArgs args = spec.adam_args(lr, optimizer_updates_, wd);
      if (betas) {
        args.beta1 = static_cast<float>(betas->beta1);
        args.beta2 = static_cast<float>(betas->beta2);
      }
      // On the host every unit uses the vectorised kernel (DeepSpeedCPUAdam's role), bitwise
      // equal to the scalar reference optim::adam_update and 3-4x faster; the offloaded /
      // resident split (offload_optimizer.ratio) decides where state lives, and on GPU builds
      // which device updates it.
      offload::cpu_adam_update(args, shard, grad_multiplier);
    } else {
      optim::LambArgs args = spec.lamb_args(lr, optimizer_updates_, wd);
      if (betas) {
        args.beta1 = static_cast<float>(betas->beta1);
        args.beta2 = static_cast<float>(betas->beta2);
      }
      const int64_t offsets[2] = {0, shard.numel};
      optim::lamb_update(args, shard, offsets, grad_multiplier);
    }
  }
}

Status Engine::apply_update(double lr, float grad_multiplier) {
  ++optimizer_updates_;
  if (swapper_) return apply_update_nvme(lr, grad_multiplier);
  std::optional<optim::Betas> betas = options_.schedule.betas_at(optimizer_updates_);
  for (int u = 0; u < model_->layout().num_units(); ++u) {
    UnitState& s = units_[static_cast<size_t>(u)];
    update_unit(u, lr, grad_multiplier, betas, s.master.f32(), s.exp_avg.f32(), s.exp_avg_sq.f32());
    ZERO_RETURN_IF_ERROR(params_->set_values(u, s.master.f32()));
  }
  return params_->finish_updates();
}

namespace {

constexpr const char* kSwapClasses[3] = {"master", "exp_avg", "exp_avg_sq"};

std::shared_ptr<float> aligned_floats(int64_t numel) {
  const uint64_t bytes =
      offload::NvmeSwapper::slot_bytes(static_cast<uint64_t>(std::max<int64_t>(numel, 1)) * 4);
  void* p = std::aligned_alloc(offload::kDirectIoAlignBytes, bytes);
  ZERO_CHECK(p != nullptr, "out of memory allocating NVMe staging buffers");
  std::memset(p, 0, bytes);
  return std::shared_ptr<float>(static_cast<float*>(p), [](float* q) { std::free(q); });
}

}  // namespace

Status Engine::setup_nvme() {
  const OffloadOptions& off = options_.offload;
  offload::NvmeSwapperOptions so;
  so.nvme_path = off.nvme_path;
  so.rank = comm_->rank();
  so.aio = off.aio;
  auto swapper = offload::NvmeSwapper::create(so);
  if (!swapper.ok()) {
    return swapper.status().with_context("zero_optimization.offload_optimizer.nvme_path");
  }
  swapper_ = std::move(*swapper);
  uint64_t capacity = 0;
  int64_t max_numel = 0;
  for (int u = 0; u < offloaded_units_; ++u) {
    units_[static_cast<size_t>(u)].swap_offset = capacity;
    const int64_t numel = partition_numel(u);
    capacity += offload::NvmeSwapper::slot_bytes(static_cast<uint64_t>(numel) * 4);
    max_numel = std::max(max_numel, numel);
  }
  for (const char* c : kSwapClasses) {
    ZERO_RETURN_IF_ERROR(swapper_->add_file(c, std::max<uint64_t>(capacity, 1))
                             .with_context("zero_optimization.offload_optimizer.nvme_path"));
  }
  staging_numel_ = static_cast<uint64_t>(std::max<int64_t>(max_numel, 1));
  const int sets = 1 + (off.pipeline_read ? 1 : 0) + (off.pipeline_write ? 1 : 0);
  staging_.resize(static_cast<size_t>(sets));
  for (Staging& st : staging_) {
    st.master = aligned_floats(max_numel);
    st.exp_avg = aligned_floats(max_numel);
    st.exp_avg_sq = aligned_floats(max_numel);
  }
  // RAM: the staging sets only; the partitions themselves live in the swap files.
  const int64_t set_bytes = static_cast<int64_t>(
      offload::NvmeSwapper::slot_bytes(static_cast<uint64_t>(std::max<int64_t>(max_numel, 1)) * 4));
  memory_.master_bytes += sets * set_bytes;
  memory_.optimizer_state_bytes += 2 * sets * set_bytes;
  memory_.offloaded_bytes += static_cast<int64_t>(3 * capacity);
  return ok_status();
}

Status Engine::submit_swap(int u, Staging& st, bool write, bool master_only) {
  const UnitState& s = units_[static_cast<size_t>(u)];
  const size_t nbytes = static_cast<size_t>(partition_numel(u)) * sizeof(float);
  if (nbytes == 0) return ok_status();
  float* bufs[3] = {st.master.get(), st.exp_avg.get(), st.exp_avg_sq.get()};
  for (int k = 0; k < (master_only ? 1 : 3); ++k) {
    StatusOr<offload::Ticket> t =
        write ? swapper_->submit_write(kSwapClasses[k], s.swap_offset, nbytes, bufs[k])
              : swapper_->submit_read(kSwapClasses[k], s.swap_offset, nbytes, bufs[k]);
    if (!t.ok()) return t.status();
    (write ? st.writes : st.reads).push_back(t->id);
  }
  return ok_status();
}

Status Engine::wait_tickets(offload::NvmeSwapper& swapper, std::vector<uint64_t>* tickets) {
  Status first = ok_status();
  for (uint64_t id : *tickets) {
    Status s = swapper.wait(offload::Ticket{id});
    if (first.ok() && !s.ok()) first = s;
  }
  tickets->clear();
  return first;
}

Status Engine::apply_update_nvme(double lr, float grad_multiplier) {
  // Per unit: read master + moments into a staging set, update, install, write back. With
  // pipeline_read the next unit's read is in flight during this update; with pipeline_write the
  // previous unit's write-back is. Staging sets rotate, so a set is reused only after its
  // write-back finished.
  const OffloadOptions& off = options_.offload;
  const std::optional<optim::Betas> betas = options_.schedule.betas_at(optimizer_updates_);
  // Units [0, offloaded_units_) live on NVMe; the rest (offload_optimizer.ratio < 1) in RAM.
  const int n = offloaded_units_;
  const int sets = static_cast<int>(staging_.size());
  auto start_read = [&](int u) -> Status {
    Staging& st = staging_[static_cast<size_t>(u % sets)];
    ZERO_RETURN_IF_ERROR(wait_tickets(*swapper_, &st.writes));
    return submit_swap(u, st, /*write=*/false);
  };
  auto run = [&]() -> Status {
    for (int u = 0; u < n; ++u) {
      Staging& st = staging_[static_cast<size_t>(u % sets)];
      if (u == 0 || !off.pipeline_read) ZERO_RETURN_IF_ERROR(start_read(u));
      ZERO_RETURN_IF_ERROR(wait_tickets(*swapper_, &st.reads));
      if (off.pipeline_read && u + 1 < n) ZERO_RETURN_IF_ERROR(start_read(u + 1));
      update_unit(u, lr, grad_multiplier, betas, st.master.get(), st.exp_avg.get(),
                  st.exp_avg_sq.get());
      ZERO_RETURN_IF_ERROR(params_->set_values(u, st.master.get()));
      ZERO_RETURN_IF_ERROR(submit_swap(u, st, /*write=*/true));
      if (!off.pipeline_write) ZERO_RETURN_IF_ERROR(wait_tickets(*swapper_, &st.writes));
    }
    for (Staging& st : staging_) ZERO_RETURN_IF_ERROR(wait_tickets(*swapper_, &st.writes));
    for (int u = n; u < model_->layout().num_units(); ++u) {
      UnitState& s = units_[static_cast<size_t>(u)];
      update_unit(u, lr, grad_multiplier, betas, s.master.f32(), s.exp_avg.f32(),
                  s.exp_avg_sq.f32());
      ZERO_RETURN_IF_ERROR(params_->set_values(u, s.master.f32()));
    }
    return ok_status();
  };
  Status s = run();
  if (!s.ok()) {
    // Leave no request in flight on the staging buffers.
    (void)swapper_->wait_all();
    for (Staging& st : staging_) {
      st.reads.clear();
      st.writes.clear();
    }
    return s.with_context("optimizer step on NVMe-offloaded state");
  }
  return params_->finish_updates();
}

Status Engine::read_partition_state(int u, float* master, float* exp_avg, float* exp_avg_sq) const {
  const size_t nbytes = static_cast<size_t>(partition_numel(u)) * sizeof(float);
  float* dst[3] = {master, exp_avg, exp_avg_sq};
  const UnitState& s = units_[static_cast<size_t>(u)];
  if (!s.on_nvme) {
    const float* src[3] = {s.master.f32(), s.exp_avg.f32(), s.exp_avg_sq.f32()};
    for (int k = 0; k < 3; ++k) {
      if (dst[k] != nullptr && nbytes > 0) std::memcpy(dst[k], src[k], nbytes);
    }
    return ok_status();
  }
  for (int k = 0; k < 3; ++k) {
    if (dst[k] == nullptr || nbytes == 0) continue;
    ZERO_RETURN_IF_ERROR(swapper_->read(kSwapClasses[k], s.swap_offset, nbytes, dst[k]));
  }
  return ok_status();
}

}  // namespace zero::runtime

namespace zero::runtime {

Status Engine::restore(const RestoreState& state) {
  global_step_ = state.global_step;
  optimizer_updates_ = state.optimizer_updates;
  if (!state.schedule_state.is_null()) {
    ZERO_RETURN_IF_ERROR(options_.schedule.restore(state.schedule_state));
  }
  if (!state.loss_scaler_state.is_null()) {
    ZERO_RETURN_IF_ERROR(scaler_->restore(state.loss_scaler_state));
  }
  for (int u = 0; u < shard_layout_->num_units(); ++u) {
    UnitState& s = units_[static_cast<size_t>(u)];
    const int64_t begin = partition_begin(u), end = begin + partition_numel(u);
    if (s.on_nvme) {
      // Through a staging set into the swap files.
      Staging& st = staging_[0];
      ZERO_RETURN_IF_ERROR(state.read_partition(u, begin, end, st.master.get(), st.exp_avg.get(),
                                                st.exp_avg_sq.get()));
      ZERO_RETURN_IF_ERROR(params_->set_values(u, st.master.get()));
      ZERO_RETURN_IF_ERROR(submit_swap(u, st, /*write=*/true));
      ZERO_RETURN_IF_ERROR(wait_tickets(*swapper_, &st.writes));
      continue;
    }
    ZERO_RETURN_IF_ERROR(
        state.read_partition(u, begin, end, s.master.f32(), s.exp_avg.f32(), s.exp_avg_sq.f32()));
    ZERO_RETURN_IF_ERROR(params_->set_values(u, s.master.f32()));
  }
  return params_->finish_updates();
}

}  // namespace zero::runtime
