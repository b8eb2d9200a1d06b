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

std::shared_ptr<std::byte> aligned_bytes(uint64_t bytes) {
  const uint64_t rounded = offload::NvmeSwapper::slot_bytes(std::max<uint64_t>(bytes, 4));
  void* p = std::aligned_alloc(offload::kDirectIoAlignBytes, rounded);
  ZERO_CHECK(p != nullptr, "out of memory allocating NVMe staging buffers");
  std::memset(p, 0, rounded);
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); });
}

TensorView host_view(void* data, DType dtype, int64_t numel) {
  return TensorView{data, dtype, Shape{numel}, Device::kCpu};
}

// fp32 values into `dst` of `dtype` (round to nearest even) or a plain copy.
void narrow_into(const float* src, void* dst, DType dtype, int64_t numel) {
  if (numel == 0) return;
  if (dtype == DType::kF32) {
    if (dst != src) std::memcpy(dst, src, static_cast<size_t>(numel) * sizeof(float));
    return;
  }
  convert_from_f32(src, dst, dtype, static_cast<size_t>(numel));
}

}  // namespace

OptimizerStateStore::OptimizerStateStore(const OffloadOptions& offload,
                                         std::vector<int64_t> partition_numel, int rank,
                                         StateDtypes dtypes)
    : offload_(offload),
      partition_numel_(std::move(partition_numel)),
      rank_(rank),
      dtypes_(dtypes) {}

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
    device::ExecutionContext* device, StateDtypes dtypes) {
  if (!(offload.ratio >= 0.0 && offload.ratio <= 1.0)) {
    return invalid_argument("zero_optimization.offload_optimizer.ratio: {} is not in [0, 1]",
                            offload.ratio);
  }
  ZERO_CHECK((dtypes.master == DType::kF32 || dtypes.master == DType::kBF16) &&
                 (dtypes.moments == DType::kF32 || dtypes.moments == DType::kBF16) &&
                 (dtypes.moments == DType::kF32 || dtypes.master == DType::kBF16),
             "optimizer state dtypes: master ", dtype_name(dtypes.master), ", moments ",
             dtype_name(dtypes.moments));
  std::unique_ptr<OptimizerStateStore> st(
      new OptimizerStateStore(offload, std::move(partition_numel), rank, dtypes));
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
  std::vector<float> f32;  // a bf16 master's fp32 initial values, one unit at a time
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
      ZERO_RETURN_IF_ERROR(st->fill_master(u, fill, sg.master.get(), f32));
      ZERO_RETURN_IF_ERROR(install(u, st->staging_refs(u, sg).master));
      std::memset(sg.exp_avg.get(), 0, static_cast<size_t>(numel) * st->elem_bytes(1));
      std::memset(sg.exp_avg_sq.get(), 0, static_cast<size_t>(numel) * st->elem_bytes(2));
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
    s.master = Tensor(Shape{numel}, dtypes.master);
    s.exp_avg = Tensor(Shape{numel}, dtypes.moments);
    s.exp_avg_sq = Tensor(Shape{numel}, dtypes.moments);
    memory.master_bytes += static_cast<int64_t>(s.master.nbytes());
    memory.optimizer_state_bytes += static_cast<int64_t>(2 * s.exp_avg.nbytes());
    ZERO_RETURN_IF_ERROR(st->fill_master(u, fill, s.master.data(), f32));
    ZERO_RETURN_IF_ERROR(install(u, s.master.view()));
  }
  if (offload.pin_memory && st->offloaded_units_ > 0) st->pin(memory);
  return st;
}

Status OptimizerStateStore::fill_master(int u, const FillFn& fill, void* master,
                                        std::vector<float>& f32) {
  if (dtypes_.master == DType::kF32) return fill(u, static_cast<float*>(master));
  const int64_t numel = partition_numel_[static_cast<size_t>(u)];
  f32.resize(static_cast<size_t>(std::max<int64_t>(numel, 1)));
  ZERO_RETURN_IF_ERROR(fill(u, f32.data()));
  narrow_into(f32.data(), master, dtypes_.master, numel);
  return ok_status();
}

Status OptimizerStateStore::load_host(int u, const LoadFn& load, void* master, void* exp_avg,
                                      void* exp_avg_sq) {
  if (dtypes_.fp32()) {
    return load(u, static_cast<float*>(master), static_cast<float*>(exp_avg),
                static_cast<float*>(exp_avg_sq));
  }
  const int64_t numel = partition_numel_[static_cast<size_t>(u)];
  std::vector<float> f32(static_cast<size_t>(3 * numel));
  float* parts[3] = {f32.data(), f32.data() + numel, f32.data() + 2 * numel};
  ZERO_RETURN_IF_ERROR(load(u, parts[0], parts[1], parts[2]));
  void* dst[3] = {master, exp_avg, exp_avg_sq};
  for (int k = 0; k < 3; ++k) narrow_into(parts[k], dst[k], dtype_of(k), numel);
  return ok_status();
}

OptimizerStateStore::StateRefs OptimizerStateStore::staging_refs(int u, const Staging& st) const {
  const int64_t numel = partition_numel_[static_cast<size_t>(u)];
  return StateRefs{host_view(st.master.get(), dtype_of(0), numel),
                   host_view(st.exp_avg.get(), dtype_of(1), numel),
                   host_view(st.exp_avg_sq.get(), dtype_of(2), numel)};
}

OptimizerStateStore::StateRefs OptimizerStateStore::unit_refs(int u) const {
  const UnitState& s = units_[static_cast<size_t>(u)];
  if (device_ != nullptr) return StateRefs{device_view(u, 0), device_view(u, 1), device_view(u, 2)};
  return StateRefs{s.master.view(), s.exp_avg.view(), s.exp_avg_sq.view()};
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
  // One unit's initial master weights: fp32 from `fill`, then in the master dtype.
  std::vector<float> host(static_cast<size_t>(max_numel));
  std::vector<std::byte> narrowed(static_cast<size_t>(max_numel) * elem_bytes(0));
  for (int u = 0; u < num_units(); ++u) {
    UnitState& s = units_[static_cast<size_t>(u)];
    const int64_t numel = partition_numel_[static_cast<size_t>(u)];
    for (int k = 0; k < 3; ++k) {
      StatusOr<device::DeviceBuffer> b = backend.allocate(dtype_of(k), numel);
      if (!b.ok()) return b.status().with_context(fmt::format("optimizer state of unit {}", u));
      s.on_device[k] = std::move(*b);
      const int64_t bytes = numel * static_cast<int64_t>(elem_bytes(k));
      (k == 0 ? memory.master_bytes : memory.optimizer_state_bytes) += bytes;
      memory.device_bytes += bytes;
    }
    ZERO_RETURN_IF_ERROR(fill(u, host.data()));
    narrow_into(host.data(), narrowed.data(), dtype_of(0), numel);
    backend.transfer(stream, device_view(u, 0), host_view(narrowed.data(), dtype_of(0), numel));
    backend.zero(stream, device_view(u, 1));
    backend.zero(stream, device_view(u, 2));
    ZERO_RETURN_IF_ERROR(install(u, device_view(u, 0)));
    // Why a host wait: the host buffer is refilled for the next unit (once, at start-up).
    ZERO_RETURN_IF_ERROR(stream.synchronize().with_context("copying the initial master weights"));
  }
  return ok_status();
}

Status OptimizerStateStore::load_unit_on_device(int u, const LoadFn& load,
                                                const InstallFn& install) {
  const int64_t numel = partition_numel_[static_cast<size_t>(u)];
  std::vector<std::byte> host(static_cast<size_t>(numel) *
                              (elem_bytes(0) + elem_bytes(1) + elem_bytes(2)));
  void* parts[3] = {host.data(), host.data() + numel * elem_bytes(0),
                    host.data() + numel * (elem_bytes(0) + elem_bytes(1))};
  ZERO_RETURN_IF_ERROR(load_host(u, load, parts[0], parts[1], parts[2]));
  device::Stream& stream = device_->compute();
  for (int k = 0; k < 3; ++k) {
    device_->backend().transfer(stream, device_view(u, k), host_view(parts[k], dtype_of(k), numel));
  }
  ZERO_RETURN_IF_ERROR(install(u, device_view(u, 0)));
  // Why a host wait: `host` is freed on return (a restore, not a step).
  return stream.synchronize().with_context("restoring the optimizer state");
}

Status OptimizerStateStore::read_partition_on_device(int u, float* master, float* exp_avg,
                                                     float* exp_avg_sq) const {
  const int64_t numel = partition_numel_[static_cast<size_t>(u)];
  float* dst[3] = {master, exp_avg, exp_avg_sq};
  std::vector<std::byte> narrow[3];  // bf16 arrays land here first
  device::Stream& stream = device_->compute();
  for (int k = 0; k < 3; ++k) {
    if (dst[k] == nullptr || numel == 0) continue;
    void* host = dst[k];
    if (dtype_of(k) != DType::kF32) {
      narrow[k].resize(static_cast<size_t>(numel) * elem_bytes(k));
      host = narrow[k].data();
    }
    device_->backend().transfer(stream, host_view(host, dtype_of(k), numel), device_view(u, k));
  }
  // Why a host wait: the caller reads the host copies on return (a checkpoint, not a step).
  ZERO_RETURN_IF_ERROR(
      stream.synchronize().with_context("reading the optimizer state from the device"));
  for (int k = 0; k < 3; ++k) {
    if (!narrow[k].empty()) {
      convert_to_f32(narrow[k].data(), dtype_of(k), dst[k], static_cast<size_t>(numel));
    }
  }
  return ok_status();
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
    pin_range(st.master.get(), offload::NvmeSwapper::slot_bytes(staging_numel_ * elem_bytes(0)));
    pin_range(st.exp_avg.get(), offload::NvmeSwapper::slot_bytes(staging_numel_ * elem_bytes(1)));
    pin_range(st.exp_avg_sq.get(),
              offload::NvmeSwapper::slot_bytes(staging_numel_ * elem_bytes(2)));
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
  // Each file's slots are sized by its own element bytes (a bf16 master, fp32 moments).
  uint64_t capacity[3] = {0, 0, 0};
  int64_t max_numel = 0;
  for (int u = 0; u < offloaded_units_; ++u) {
    const int64_t numel = partition_numel_[static_cast<size_t>(u)];
    for (int k = 0; k < 3; ++k) {
      units_[static_cast<size_t>(u)].swap_offset[k] = capacity[k];
      capacity[k] += offload::NvmeSwapper::slot_bytes(static_cast<uint64_t>(numel) * elem_bytes(k));
    }
    max_numel = std::max(max_numel, numel);
  }
  for (int k = 0; k < 3; ++k) {
    ZERO_RETURN_IF_ERROR(swapper_->add_file(kSwapClasses[k], std::max<uint64_t>(capacity[k], 1))
                             .with_context("zero_optimization.offload_optimizer.nvme_path"));
  }
  staging_numel_ = static_cast<uint64_t>(std::max<int64_t>(max_numel, 1));
  const int sets = 1 + (offload_.pipeline_read ? 1 : 0) + (offload_.pipeline_write ? 1 : 0);
  staging_.resize(static_cast<size_t>(sets));
  for (Staging& st : staging_) {
    st.master = aligned_bytes(staging_numel_ * elem_bytes(0));
    st.exp_avg = aligned_bytes(staging_numel_ * elem_bytes(1));
    st.exp_avg_sq = aligned_bytes(staging_numel_ * elem_bytes(2));
  }
  // RAM: the staging sets only; the partitions themselves live in the swap files.
  auto set_bytes = [&](int k) {
    return static_cast<int64_t>(offload::NvmeSwapper::slot_bytes(staging_numel_ * elem_bytes(k)));
  };
  memory.master_bytes += sets * set_bytes(0);
  memory.optimizer_state_bytes += sets * (set_bytes(1) + set_bytes(2));
  memory.offloaded_bytes += static_cast<int64_t>(capacity[0] + capacity[1] + capacity[2]);
  return ok_status();
}

Status OptimizerStateStore::submit_swap(int u, Staging& st, bool write, bool master_only) {
  const UnitState& s = units_[static_cast<size_t>(u)];
  const auto numel = static_cast<size_t>(partition_numel_[static_cast<size_t>(u)]);
  if (numel == 0) return ok_status();
  std::byte* bufs[3] = {st.master.get(), st.exp_avg.get(), st.exp_avg_sq.get()};
  for (int k = 0; k < (master_only ? 1 : 3); ++k) {
    const size_t nbytes = numel * elem_bytes(k);
    StatusOr<offload::Ticket> t =
        write ? swapper_->submit_write(kSwapClasses[k], s.swap_offset[k], nbytes, bufs[k])
              : swapper_->submit_read(kSwapClasses[k], s.swap_offset[k], nbytes, bufs[k]);
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

OptimizerStateStore::StateRefs OptimizerStateStore::ram_refs(int u) {
  ZERO_CHECK(swapper_ == nullptr && device_ == nullptr,
             "ram_refs: the optimizer state is not in RAM");
  return unit_refs(u);
}

OptimizerStateStore::RamState OptimizerStateStore::ram_state(int u) {
  ZERO_CHECK(swapper_ == nullptr && device_ == nullptr && dtypes_.fp32(),
             "ram_state: the optimizer state is not fp32 in RAM");
  UnitState& s = units_[static_cast<size_t>(u)];
  return RamState{s.master.f32(), s.exp_avg.f32(), s.exp_avg_sq.f32()};
}

Status OptimizerStateStore::update_all(const UpdateFn& update, const InstallFn& install) {
  if (swapper_) return update_nvme_units(update, install);
  // On a device the visitor and install queue their work on the compute stream: no wait here.
  for (int u = 0; u < num_units(); ++u) {
    const StateRefs refs = unit_refs(u);
    update(u, refs);
    ZERO_RETURN_IF_ERROR(install(u, refs.master));
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
      const StateRefs refs = staging_refs(u, st);
      update(u, refs);
      ZERO_RETURN_IF_ERROR(install(u, refs.master));
      ZERO_RETURN_IF_ERROR(submit_swap(u, st, /*write=*/true));
      if (!offload_.pipeline_write) ZERO_RETURN_IF_ERROR(wait_tickets(*swapper_, &st.writes));
    }
    for (Staging& st : staging_) ZERO_RETURN_IF_ERROR(wait_tickets(*swapper_, &st.writes));
    for (int u = n; u < num_units(); ++u) {
      const StateRefs refs = unit_refs(u);
      update(u, refs);
      ZERO_RETURN_IF_ERROR(install(u, refs.master));
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
      ZERO_RETURN_IF_ERROR(
          load_host(u, load, st.master.get(), st.exp_avg.get(), st.exp_avg_sq.get()));
      ZERO_RETURN_IF_ERROR(install(u, staging_refs(u, st).master));
      ZERO_RETURN_IF_ERROR(submit_swap(u, st, /*write=*/true));
      ZERO_RETURN_IF_ERROR(wait_tickets(*swapper_, &st.writes));
      continue;
    }
    ZERO_RETURN_IF_ERROR(
        load_host(u, load, s.master.data(), s.exp_avg.data(), s.exp_avg_sq.data()));
    ZERO_RETURN_IF_ERROR(install(u, s.master.view()));
  }
  return ok_status();
}

Status OptimizerStateStore::read_partition(int u, float* master, float* exp_avg,
                                           float* exp_avg_sq) const {
  if (device_ != nullptr) return read_partition_on_device(u, master, exp_avg, exp_avg_sq);
  const auto numel = static_cast<size_t>(partition_numel_[static_cast<size_t>(u)]);
  float* dst[3] = {master, exp_avg, exp_avg_sq};
  const UnitState& s = units_[static_cast<size_t>(u)];
  if (!s.on_nvme) {
    const void* src[3] = {s.master.data(), s.exp_avg.data(), s.exp_avg_sq.data()};
    for (int k = 0; k < 3; ++k) {
      if (dst[k] != nullptr && numel > 0) convert_to_f32(src[k], dtype_of(k), dst[k], numel);
    }
    return ok_status();
  }
  std::vector<std::byte> narrow;  // a bf16 array read from its swap file, then widened
  for (int k = 0; k < 3; ++k) {
    if (dst[k] == nullptr || numel == 0) continue;
    void* host = dst[k];
    if (dtype_of(k) != DType::kF32) {
      narrow.resize(numel * elem_bytes(k));
      host = narrow.data();
    }
    ZERO_RETURN_IF_ERROR(
        swapper_->read(kSwapClasses[k], s.swap_offset[k], numel * elem_bytes(k), host));
    if (host != dst[k]) convert_to_f32(host, dtype_of(k), dst[k], numel);
  }
  return ok_status();
}

}  // namespace zero::runtime
