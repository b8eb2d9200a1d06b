// OptimizerStateStore (optimizer_state_store.h): the placements of the optimizer state, moved out
// of the engine unchanged (same order of updates and I/O, so results are bitwise as before).
#include "runtime/optimizer_state_store.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "offload/nvme_swapper.h"

namespace zero::runtime {
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

OptimizerStateStore::OptimizerStateStore(const OffloadOptions& offload,
                                         std::vector<int64_t> partition_numel, int rank)
    : offload_(offload), partition_numel_(std::move(partition_numel)), rank_(rank) {}

OptimizerStateStore::~OptimizerStateStore() {
  // The swapper waits for in-flight I/O on the staging buffers and removes its files; the staging
  // buffers (members declared after it) are freed after.
  swapper_.reset();
  // Why a host wait: queued updates may still write the device state freed below (errors are
  // reported by the owner of the stream).
  if (device_ != nullptr) (void)device_->compute().synchronize();
}

StatusOr<std::unique_ptr<OptimizerStateStore>> OptimizerStateStore::create(
    const OffloadOptions& offload, std::vector<int64_t> partition_numel, int rank,
    sharding::MemoryAccounting& memory, const FillFn& fill, const InstallFn& install,
    device::ExecutionContext* device) {
  if (!(offload.ratio >= 0.0 && offload.ratio <= 1.0)) {
    return invalid_argument("zero_optimization.offload_optimizer.ratio: {} is not in [0, 1]",
                            offload.ratio);
  }
  std::unique_ptr<OptimizerStateStore> st(
      new OptimizerStateStore(offload, std::move(partition_numel), rank));
  if (device != nullptr) {
    ZERO_CHECK(offload.optimizer == OptimizerOffload::kNone,
               "optimizer state on a device with offload_optimizer set");
    st->device_ = device;
    st->units_.resize(st->partition_numel_.size());
    ZERO_RETURN_IF_ERROR(st->create_on_device(memory, fill, install));
    return st;
  }
  const int num_units = static_cast<int>(st->partition_numel_.size());
  st->offloaded_units_ = offload.optimizer == OptimizerOffload::kNone
                             ? 0
                             : static_cast<int>(offload.ratio * static_cast<double>(num_units));
  st->units_.resize(static_cast<size_t>(num_units));
  for (int u = 0; u < num_units; ++u) {
    st->units_[static_cast<size_t>(u)].on_nvme =
        offload.optimizer == OptimizerOffload::kNvme && u < st->offloaded_units_;
  }
  if (st->offloaded_units_ > 0 && offload.optimizer == OptimizerOffload::kNvme) {
    // Each unit's initial state goes through a staging set straight into the swap files.
    ZERO_RETURN_IF_ERROR(st->setup_nvme(memory));
    Staging& sg = st->staging_[0];
    for (int u = 0; u < st->offloaded_units_; ++u) {
      const int64_t numel = st->partition_numel_[static_cast<size_t>(u)];
      ZERO_RETURN_IF_ERROR(fill(u, sg.master.get()));
      ZERO_RETURN_IF_ERROR(install(u, sg.master.get()));
      std::memset(sg.exp_avg.get(), 0, static_cast<size_t>(numel) * sizeof(float));
      std::memset(sg.exp_avg_sq.get(), 0, static_cast<size_t>(numel) * sizeof(float));
      // fast_init: the moments are zero and the preallocated files already read back as zeros.
      ZERO_RETURN_IF_ERROR(
          st->submit_swap(u, sg, /*write=*/true, /*master_only=*/offload.fast_init));
      ZERO_RETURN_IF_ERROR(wait_tickets(*st->swapper_, &sg.writes));
    }
  }
  for (int u = 0; u < num_units; ++u) {
    UnitState& s = st->units_[static_cast<size_t>(u)];
    if (s.on_nvme) continue;
    const int64_t numel = st->partition_numel_[static_cast<size_t>(u)];
    s.master = Tensor(Shape{numel});
    s.exp_avg = Tensor(Shape{numel});
    s.exp_avg_sq = Tensor(Shape{numel});
    memory.master_bytes += static_cast<int64_t>(s.master.nbytes());
    memory.optimizer_state_bytes += static_cast<int64_t>(2 * s.exp_avg.nbytes());
    ZERO_RETURN_IF_ERROR(fill(u, s.master.f32()));
    ZERO_RETURN_IF_ERROR(install(u, s.master.f32()));
  }
  if (offload.pin_memory && st->offloaded_units_ > 0) st->pin(memory);
  return st;
}

TensorView OptimizerStateStore::device_view(int u, int k) const {
  return units_[static_cast<size_t>(u)].on_device[k].view();
}

Status OptimizerStateStore::create_on_device(sharding::MemoryAccounting& memory, const FillFn& fill,
                                             const InstallFn& install) {
  device::Backend& backend = device_->backend();
  device::Stream& stream = device_->compute();
  int64_t max_numel = 1;
  for (int64_t n : partition_numel_) max_numel = std::max(max_numel, n);
  std::vector<float> host(static_cast<size_t>(max_numel));  // one unit's initial master weights
  for (int u = 0; u < num_units(); ++u) {
    UnitState& s = units_[static_cast<size_t>(u)];
    const int64_t numel = partition_numel_[static_cast<size_t>(u)];
    for (device::DeviceBuffer& buf : s.on_device) {
      StatusOr<device::DeviceBuffer> b = backend.allocate(DType::kF32, numel);
      if (!b.ok()) return b.status().with_context(fmt::format("optimizer state of unit {}", u));
      buf = std::move(*b);
    }
    const int64_t bytes = numel * static_cast<int64_t>(sizeof(float));
    memory.master_bytes += bytes;
    memory.optimizer_state_bytes += 2 * bytes;
    memory.device_bytes += 3 * bytes;
    ZERO_RETURN_IF_ERROR(fill(u, host.data()));
    backend.transfer(stream, device_view(u, 0), TensorView{host.data(), DType::kF32, Shape{numel}});
    backend.zero(stream, device_view(u, 1));
    backend.zero(stream, device_view(u, 2));
    ZERO_RETURN_IF_ERROR(install(u, static_cast<const float*>(s.on_device[0].data())));
    // Why a host wait: the host buffer is refilled for the next unit (once, at start-up).
    ZERO_RETURN_IF_ERROR(stream.synchronize().with_context("copying the initial master weights"));
  }
  return ok_status();
}

Status OptimizerStateStore::load_unit_on_device(int u, const LoadFn& load,
                                                const InstallFn& install) {
  const int64_t numel = partition_numel_[static_cast<size_t>(u)];
  std::vector<float> host(static_cast<size_t>(3 * numel));
  float* parts[3] = {host.data(), host.data() + numel, host.data() + 2 * numel};
  ZERO_RETURN_IF_ERROR(load(u, parts[0], parts[1], parts[2]));
  device::Stream& stream = device_->compute();
  for (int k = 0; k < 3; ++k) {
    device_->backend().transfer(stream, device_view(u, k),
                                TensorView{parts[k], DType::kF32, Shape{numel}});
  }
  ZERO_RETURN_IF_ERROR(install(u, static_cast<const float*>(device_view(u, 0).data)));
  // Why a host wait: `host` is freed on return (a restore, not a step).
  return stream.synchronize().with_context("restoring the optimizer state");
}

Status OptimizerStateStore::read_partition_on_device(int u, float* master, float* exp_avg,
                                                     float* exp_avg_sq) const {
  const int64_t numel = partition_numel_[static_cast<size_t>(u)];
  float* dst[3] = {master, exp_avg, exp_avg_sq};
  device::Stream& stream = device_->compute();
  for (int k = 0; k < 3; ++k) {
    if (dst[k] == nullptr || numel == 0) continue;
    device_->backend().transfer(stream, TensorView{dst[k], DType::kF32, Shape{numel}},
                                device_view(u, k));
  }
  // Why a host wait: the caller reads the host copies on return (a checkpoint, not a step).
  return stream.synchronize().with_context("reading the optimizer state from the device");
}

void OptimizerStateStore::pin(sharding::MemoryAccounting& memory) {
  std::string why_not;
  auto pin_range = [&](void* data, size_t nbytes) {
    if (data == nullptr || nbytes == 0) return;
    pins_.emplace_back(data, nbytes);
    if (!pins_.back().pinned() && why_not.empty()) why_not = pins_.back().why_not();
    memory.pinned_bytes += static_cast<int64_t>(pins_.back().nbytes());
  };
  for (int u = 0; u < offloaded_units_; ++u) {
    UnitState& s = units_[static_cast<size_t>(u)];
    if (s.on_nvme) continue;
    pin_range(s.master.view().data, s.master.nbytes());
    pin_range(s.exp_avg.view().data, s.exp_avg.nbytes());
    pin_range(s.exp_avg_sq.view().data, s.exp_avg_sq.nbytes());
  }
  for (Staging& st : staging_) {
    const size_t bytes = offload::NvmeSwapper::slot_bytes(staging_numel_ * sizeof(float));
    pin_range(st.master.get(), bytes);
    pin_range(st.exp_avg.get(), bytes);
    pin_range(st.exp_avg_sq.get(), bytes);
  }
  if (!why_not.empty() && rank_ == 0) {
    spdlog::warn(
        "zero_optimization.offload_optimizer.pin_memory: the offloaded optimizer state stays "
        "pageable: {} (raise `ulimit -l` to pin it)",
        why_not);
  }
}

Status OptimizerStateStore::setup_nvme(sharding::MemoryAccounting& memory) {
  offload::NvmeSwapperOptions so;
  so.nvme_path = offload_.nvme_path;
  so.rank = rank_;
  so.aio = offload_.aio;
  auto swapper = offload::NvmeSwapper::create(so);
  if (!swapper.ok()) {
    return swapper.status().with_context("zero_optimization.offload_optimizer.nvme_path");
  }
  swapper_ = std::move(*swapper);
  uint64_t capacity = 0;
  int64_t max_numel = 0;
  for (int u = 0; u < offloaded_units_; ++u) {
    units_[static_cast<size_t>(u)].swap_offset = capacity;
    const int64_t numel = partition_numel_[static_cast<size_t>(u)];
    capacity += offload::NvmeSwapper::slot_bytes(static_cast<uint64_t>(numel) * 4);
    max_numel = std::max(max_numel, numel);
  }
  for (const char* c : kSwapClasses) {
    ZERO_RETURN_IF_ERROR(swapper_->add_file(c, std::max<uint64_t>(capacity, 1))
                             .with_context("zero_optimization.offload_optimizer.nvme_path"));
  }
  staging_numel_ = static_cast<uint64_t>(std::max<int64_t>(max_numel, 1));
  const int sets = 1 + (offload_.pipeline_read ? 1 : 0) + (offload_.pipeline_write ? 1 : 0);
  staging_.resize(static_cast<size_t>(sets));
  for (Staging& st : staging_) {
    st.master = aligned_floats(max_numel);
    st.exp_avg = aligned_floats(max_numel);
    st.exp_avg_sq = aligned_floats(max_numel);
  }
  // RAM: the staging sets only; the partitions themselves live in the swap files.
  const int64_t set_bytes = static_cast<int64_t>(
      offload::NvmeSwapper::slot_bytes(static_cast<uint64_t>(std::max<int64_t>(max_numel, 1)) * 4));
  memory.master_bytes += sets * set_bytes;
  memory.optimizer_state_bytes += 2 * sets * set_bytes;
  memory.offloaded_bytes += static_cast<int64_t>(3 * capacity);
  return ok_status();
}

Status OptimizerStateStore::submit_swap(int u, Staging& st, bool write, bool master_only) {
  const UnitState& s = units_[static_cast<size_t>(u)];
  const size_t nbytes = static_cast<size_t>(partition_numel_[static_cast<size_t>(u)]) * 4;
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

Status OptimizerStateStore::wait_tickets(offload::NvmeSwapper& swapper,
                                         std::vector<uint64_t>* tickets) {
  Status first = ok_status();
  for (uint64_t id : *tickets) {
    Status s = swapper.wait(offload::Ticket{id});
    if (first.ok() && !s.ok()) first = s;
  }
  tickets->clear();
  return first;
}

OptimizerStateStore::RamState OptimizerStateStore::ram_state(int u) {
  ZERO_CHECK(swapper_ == nullptr && device_ == nullptr,
             "ram_state: the optimizer state is not in RAM");
  UnitState& s = units_[static_cast<size_t>(u)];
  return RamState{s.master.f32(), s.exp_avg.f32(), s.exp_avg_sq.f32()};
}

Status OptimizerStateStore::update_all(const UpdateFn& update, const InstallFn& install) {
  if (swapper_) return update_nvme_units(update, install);
  if (device_ != nullptr) {
    // The visitor and install queue their work on the compute stream: no wait here.
    for (int u = 0; u < num_units(); ++u) {
      float* p[3];
      for (int k = 0; k < 3; ++k) p[k] = static_cast<float*>(device_view(u, k).data);
      update(u, p[0], p[1], p[2]);
      ZERO_RETURN_IF_ERROR(install(u, p[0]));
    }
    return ok_status();
  }
  for (int u = 0; u < num_units(); ++u) {
    UnitState& s = units_[static_cast<size_t>(u)];
    update(u, s.master.f32(), s.exp_avg.f32(), s.exp_avg_sq.f32());
    ZERO_RETURN_IF_ERROR(install(u, s.master.f32()));
  }
  return ok_status();
}

Status OptimizerStateStore::update_nvme_units(const UpdateFn& update, const InstallFn& install) {
  // Per unit: read master + moments into a staging set, update, install, write back. With
  // pipeline_read the next unit's read is in flight during this update; with pipeline_write the
  // previous unit's write-back is. Staging sets rotate, so a set is reused only after its
  // write-back finished.
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
      if (u == 0 || !offload_.pipeline_read) ZERO_RETURN_IF_ERROR(start_read(u));
      ZERO_RETURN_IF_ERROR(wait_tickets(*swapper_, &st.reads));
      if (offload_.pipeline_read && u + 1 < n) ZERO_RETURN_IF_ERROR(start_read(u + 1));
      update(u, st.master.get(), st.exp_avg.get(), st.exp_avg_sq.get());
      ZERO_RETURN_IF_ERROR(install(u, st.master.get()));
      ZERO_RETURN_IF_ERROR(submit_swap(u, st, /*write=*/true));
      if (!offload_.pipeline_write) ZERO_RETURN_IF_ERROR(wait_tickets(*swapper_, &st.writes));
    }
    for (Staging& st : staging_) ZERO_RETURN_IF_ERROR(wait_tickets(*swapper_, &st.writes));
    for (int u = n; u < num_units(); ++u) {
      UnitState& s = units_[static_cast<size_t>(u)];
      update(u, s.master.f32(), s.exp_avg.f32(), s.exp_avg_sq.f32());
      ZERO_RETURN_IF_ERROR(install(u, s.master.f32()));
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
  return ok_status();
}

Status OptimizerStateStore::load_all(const LoadFn& load, const InstallFn& install) {
  for (int u = 0; u < num_units(); ++u) {
    UnitState& s = units_[static_cast<size_t>(u)];
    if (device_ != nullptr) {
      ZERO_RETURN_IF_ERROR(load_unit_on_device(u, load, install));
      continue;
    }
    if (s.on_nvme) {
      // Through a staging set into the swap files.
      Staging& st = staging_[0];
      ZERO_RETURN_IF_ERROR(load(u, st.master.get(), st.exp_avg.get(), st.exp_avg_sq.get()));
      ZERO_RETURN_IF_ERROR(install(u, st.master.get()));
      ZERO_RETURN_IF_ERROR(submit_swap(u, st, /*write=*/true));
      ZERO_RETURN_IF_ERROR(wait_tickets(*swapper_, &st.writes));
      continue;
    }
    ZERO_RETURN_IF_ERROR(load(u, s.master.f32(), s.exp_avg.f32(), s.exp_avg_sq.f32()));
    ZERO_RETURN_IF_ERROR(install(u, s.master.f32()));
  }
  return ok_status();
}

Status OptimizerStateStore::read_partition(int u, float* master, float* exp_avg,
                                           float* exp_avg_sq) const {
  if (device_ != nullptr) return read_partition_on_device(u, master, exp_avg, exp_avg_sq);
  const size_t nbytes = static_cast<size_t>(partition_numel_[static_cast<size_t>(u)]) * 4;
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
