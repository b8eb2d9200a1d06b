// Stage-3 parameter shards in host memory or an NVMe swap file (see param_store.h).
#include "sharding/param_store.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "core/dtype.h"
#include "kernels/elementwise/elementwise.h"
#include "offload/nvme_swapper.h"

namespace zero::sharding {
namespace {

constexpr const char* kParamClass = "param";

std::shared_ptr<std::byte> aligned_bytes(size_t nbytes) {
  const size_t rounded = (std::max<size_t>(nbytes, 1) + offload::kDirectIoAlignBytes - 1) /
                         offload::kDirectIoAlignBytes * offload::kDirectIoAlignBytes;
  void* p = std::aligned_alloc(offload::kDirectIoAlignBytes, rounded);
  ZERO_CHECK(p != nullptr, "out of memory allocating ", rounded, " bytes of parameter staging");
  std::memset(p, 0, rounded);
  return std::shared_ptr<std::byte>(static_cast<std::byte*>(p), [](std::byte* q) { std::free(q); });
}

}  // namespace

ParamStore::ParamStore(const ShardLayout& layout, const ParamOffloadOptions& options,
                       DType model_dtype, MemoryAccounting& memory,
                       device::Backend* transfer_backend)
    : layout_(layout),
      options_(options),
      dtype_(model_dtype),
      elem_bytes_(dtype_bytes(model_dtype)),
      memory_(memory),
      transfer_backend_(transfer_backend) {}

ParamStore::~ParamStore() {
  // Staging buffers and host shards are the targets / sources of requests in flight.
  if (swapper_) (void)swapper_->wait_all();
  in_flight_.clear();
}

StatusOr<std::unique_ptr<ParamStore>> ParamStore::create(const ShardLayout& layout,
                                                         const ParamOffloadOptions& options,
                                                         const std::vector<bool>& persistent,
                                                         DType model_dtype, int rank,
                                                         MemoryAccounting& memory,
                                                         device::Backend* transfer_backend) {
  std::unique_ptr<ParamStore> s(
      new ParamStore(layout, options, model_dtype, memory, transfer_backend));
  const int n = layout.num_units();
  s->units_.resize(static_cast<size_t>(n));
  // Placement: persistent units, then the others in unit order while max_in_cpu allows.
  int64_t in_cpu_numel = 0;
  int64_t max_swapped_numel = 0;
  uint64_t file_bytes = 0;
  for (int u = 0; u < n; ++u) {
    const int64_t numel = layout.unit(u).shard_numel;
    if (persistent[static_cast<size_t>(u)]) in_cpu_numel += numel;
  }
  for (int u = 0; u < n; ++u) {
    Unit& unit = s->units_[static_cast<size_t>(u)];
    const int64_t numel = layout.unit(u).shard_numel;
    const bool keep = options.device != ParamOffload::kNvme || persistent[static_cast<size_t>(u)] ||
                      in_cpu_numel + numel <= options.max_in_cpu_numel;
    if (keep) {
      if (!persistent[static_cast<size_t>(u)]) in_cpu_numel += numel;
      ZERO_ASSIGN_OR_RETURN(unit.host, s->allocate_host_copy(numel, /*loaded=*/false));
      if (options.pin_memory && transfer_backend == nullptr) {
        unit.pin = PinnedRange(unit.host.data(), unit.host.nbytes());
        if (!unit.pin.pinned() && s->pin_warning_.empty()) s->pin_warning_ = unit.pin.why_not();
        memory.pinned_bytes += static_cast<int64_t>(unit.pin.nbytes());
      }
      continue;
    }
    unit.on_nvme = true;
    unit.offset_bytes = file_bytes;
    file_bytes += offload::NvmeSwapper::slot_bytes(static_cast<uint64_t>(numel) * s->elem_bytes_);
    max_swapped_numel = std::max(max_swapped_numel, numel);
  }
  if (max_swapped_numel == 0) return s;  // nothing on NVMe (everything fits max_in_cpu)

  if (options.nvme_path.empty()) {
    return invalid_argument(
        "zero_optimization.offload_param.nvme_path: missing: required when "
        "zero_optimization.offload_param.device is \"nvme\"");
  }
  if (options.buffer_count < 1) {
    return invalid_argument("zero_optimization.offload_param.buffer_count: {} must be >= 1",
                            options.buffer_count);
  }
  if (options.buffer_numel < 1) {
    return invalid_argument("zero_optimization.offload_param.buffer_size: {} must be >= 1",
                            options.buffer_numel);
  }
  offload::NvmeSwapperOptions so;
  so.nvme_path = options.nvme_path;
  so.rank = rank;
  so.aio = options.aio;
  so.fault_hook = options.fault_hook;
  auto swapper = offload::NvmeSwapper::create(so);
  if (!swapper.ok()) {
    return swapper.status().with_context("zero_optimization.offload_param.nvme_path");
  }
  s->swapper_ = std::move(*swapper);
  ZERO_RETURN_IF_ERROR(s->swapper_->add_file(kParamClass, file_bytes)
                           .with_context("zero_optimization.offload_param.nvme_path"));
  memory.offloaded_param_bytes += static_cast<int64_t>(file_bytes);

  // Pieces: buffer_size elements, rounded down to whole 4 KiB so every piece but a shard's last
  // starts on an aligned file offset; no larger than the largest swapped shard needs.
  const int64_t align_numel = static_cast<int64_t>(offload::kDirectIoAlignBytes / s->elem_bytes_);
  int64_t piece = std::max<int64_t>(options.buffer_numel / align_numel * align_numel, align_numel);
  const int64_t largest = (max_swapped_numel + align_numel - 1) / align_numel * align_numel;
  s->staging_numel_ = std::min(piece, largest);
  for (int i = 0; i < options.buffer_count; ++i) {
    const size_t bytes = static_cast<size_t>(s->staging_numel_) * s->elem_bytes_;
    s->staging_.push_back(aligned_bytes(bytes));
    if (options.pin_memory) {
      s->staging_pins_.emplace_back(s->staging_.back().get(), bytes);
      if (!s->staging_pins_.back().pinned() && s->pin_warning_.empty()) {
        s->pin_warning_ = s->staging_pins_.back().why_not();
      }
      memory.pinned_bytes += static_cast<int64_t>(s->staging_pins_.back().nbytes());
    }
    s->free_staging_.push_back(i);
    memory.param_bytes += static_cast<int64_t>(bytes);
  }
  return s;
}

int ParamStore::num_on_nvme() const {
  return static_cast<int>(
      std::count_if(units_.begin(), units_.end(), [](const Unit& u) { return u.on_nvme; }));
}

int ParamStore::num_pieces(int u) const {
  const int64_t numel = layout_.unit(u).shard_numel;
  return static_cast<int>((numel + staging_numel_ - 1) / staging_numel_);
}

int64_t ParamStore::piece_numel(int u, int piece) const {
  const int64_t numel = layout_.unit(u).shard_numel;
  return std::min(staging_numel_, numel - piece * staging_numel_);
}

Status ParamStore::complete_oldest() {
  ZERO_CHECK(!in_flight_.empty(), "no parameter I/O in flight to complete");
  const InFlight op = in_flight_.front();
  in_flight_.pop_front();
  Status s = swapper_->wait(offload::Ticket{op.ticket});
  Unit& unit = units_[static_cast<size_t>(op.unit)];
  if (op.is_write) {
    unit.writes_pending -= 1;
  } else {
    unit.pieces_pending -= 1;
    if (s.ok() && !unit.host.empty()) {
      // Disk and host shard hold the same bytes (the model dtype).
      const size_t piece_bytes = static_cast<size_t>(staging_numel_) * elem_bytes_;
      std::memcpy(static_cast<std::byte*>(unit.host.data()) + op.piece * piece_bytes,
                  staging_[static_cast<size_t>(op.staging)].get(),
                  static_cast<size_t>(piece_numel(op.unit, op.piece)) * elem_bytes_);
    }
  }
  free_staging_.push_back(op.staging);
  if (!s.ok()) {
    return s.with_context(fmt::format("parameter shard of unit {} ({} from the NVMe swap file)",
                                      op.unit, op.is_write ? "writing" : "reading"));
  }
  return ok_status();
}

StatusOr<int> ParamStore::take_staging() {
  while (free_staging_.empty()) ZERO_RETURN_IF_ERROR(complete_oldest());
  const int i = free_staging_.back();
  free_staging_.pop_back();
  return i;
}

Status ParamStore::wait_writes(int u) {
  // Why: io_uring does not order a read after an earlier write to the same offset.
  while (units_[static_cast<size_t>(u)].writes_pending > 0) ZERO_RETURN_IF_ERROR(complete_oldest());
  return ok_status();
}

Status ParamStore::submit_read_piece(int u, int piece, int staging) {
  Unit& unit = units_[static_cast<size_t>(u)];
  const uint64_t offset = unit.offset_bytes + static_cast<uint64_t>(piece) *
                                                  static_cast<uint64_t>(staging_numel_) *
                                                  elem_bytes_;
  const size_t nbytes = static_cast<size_t>(piece_numel(u, piece)) * elem_bytes_;
  auto t = swapper_->submit_read(kParamClass, offset, nbytes,
                                 staging_[static_cast<size_t>(staging)].get());
  if (!t.ok()) {
    free_staging_.push_back(staging);
    return t.status().with_context(fmt::format("reading the parameter shard of unit {}", u));
  }
  in_flight_.push_back({u, piece, staging, t->id, /*is_write=*/false});
  unit.pieces_pending += 1;
  pieces_read_ += 1;
  return ok_status();
}

Status ParamStore::begin_load(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  if (!unit.host.empty()) return ok_status();
  ZERO_RETURN_IF_ERROR(wait_writes(u));
  ZERO_ASSIGN_OR_RETURN(unit.host,
                        allocate_host_copy(layout_.unit(u).shard_numel, /*loaded=*/true));
  unit.next_piece = 0;
  return ok_status();
}

Status ParamStore::prefetch(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  if (!unit.on_nvme) return ok_status();
  if (unit.host.empty()) {
    if (free_staging_.empty()) return ok_status();  // no buffer: do not hold memory for nothing
    ZERO_RETURN_IF_ERROR(begin_load(u));
  }
  // Only with free buffers: read-ahead must not stall the step.
  while (unit.next_piece < num_pieces(u) && !free_staging_.empty()) {
    const int staging = free_staging_.back();
    free_staging_.pop_back();
    ZERO_RETURN_IF_ERROR(submit_read_piece(u, unit.next_piece, staging));
    unit.next_piece += 1;
  }
  return ok_status();
}

StatusOr<const void*> ParamStore::load(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  if (!unit.on_nvme) return static_cast<const void*>(unit.host.data());
  ZERO_RETURN_IF_ERROR(begin_load(u));
  while (unit.next_piece < num_pieces(u)) {
    ZERO_ASSIGN_OR_RETURN(int staging, take_staging());
    ZERO_RETURN_IF_ERROR(submit_read_piece(u, unit.next_piece, staging));
    unit.next_piece += 1;
  }
  while (unit.pieces_pending > 0) ZERO_RETURN_IF_ERROR(complete_oldest());
  return static_cast<const void*>(unit.host.data());
}

void ParamStore::drop(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  if (!unit.on_nvme || unit.host.empty()) return;
  // Reads still landing in `host` (a prefetch never used) must finish first.
  while (unit.pieces_pending > 0) {
    Status s = complete_oldest();
    (void)s;  // the data is being discarded; a real I/O error resurfaces on the next load
  }
  free_loaded_copy(std::move(unit.host));
  unit.host = HostCopy{};
  unit.next_piece = 0;
}

StatusOr<ParamStore::HostCopy> ParamStore::allocate_host_copy(int64_t numel, bool loaded) {
  HostCopy copy;
  if (transfer_backend_ == nullptr) {
    copy.tensor = Tensor(Shape{numel}, dtype_);
  } else {
    auto it = std::find_if(loaded_pool_.begin(), loaded_pool_.end(),
                           [&](const device::DeviceBuffer& b) { return b.numel() == numel; });
    if (loaded && it != loaded_pool_.end()) {
      copy.buffer = std::move(*it);
      loaded_pool_.erase(it);
    } else {
      StatusOr<device::DeviceBuffer> b = transfer_backend_->allocate_host(dtype_, numel);
      if (!b.ok()) return b.status().with_context("a stage-3 parameter shard in host memory");
      copy.buffer = std::move(*b);
      memory_.pinned_bytes += static_cast<int64_t>(copy.buffer.view().nbytes());
      // A host shard is read only after its first write; zeroed anyway, as a Tensor is.
      if (!loaded) std::memset(copy.buffer.data(), 0, copy.buffer.view().nbytes());
    }
  }
  memory_.param_bytes += static_cast<int64_t>(copy.nbytes());
  return copy;
}

void ParamStore::free_loaded_copy(HostCopy copy) {
  memory_.param_bytes -= static_cast<int64_t>(copy.nbytes());
  if (copy.buffer.data() == nullptr) return;
  // Kept for the next load: a page-locked allocation costs far more than the read it serves. As
  // many as loaded shards the coordinator keeps at once (read-ahead, copies in flight).
  constexpr size_t kMaxPooled = 8;
  if (loaded_pool_.size() < kMaxPooled) {
    loaded_pool_.push_back(std::move(copy.buffer));
    return;
  }
  memory_.pinned_bytes -= static_cast<int64_t>(copy.buffer.view().nbytes());
}

void* ParamStore::host_shard(int u) {
  Unit& unit = units_[static_cast<size_t>(u)];
  ZERO_CHECK(!unit.on_nvme, "host_shard of unit ", u, ", whose shard is on NVMe");
  return unit.host.data();
}

Status ParamStore::write(int u, const float* values) { return write(u, values, DType::kF32); }

Status ParamStore::write(int u, const void* values, DType values_dtype) {
  ZERO_CHECK(values_dtype == DType::kF32 || values_dtype == dtype_, "a parameter shard of ",
             dtype_name(values_dtype), " values for a ", dtype_name(dtype_), " model");
  Unit& unit = units_[static_cast<size_t>(u)];
  const int64_t numel = layout_.unit(u).shard_numel;
  const bool as_is = values_dtype == dtype_;  // bytes as they are (fp32 into fp32 too)
  if (!unit.on_nvme) {
    if (as_is) {
      std::memcpy(unit.host.data(), values, static_cast<size_t>(numel) * elem_bytes_);
    } else {
      kernels::cpu::cast_from_f32(static_cast<const float*>(values), unit.host.data(), dtype_,
                                  numel);
    }
    return ok_status();
  }
  drop(u);  // a loaded copy now holds old values
  ZERO_RETURN_IF_ERROR(wait_writes(u));
  for (int piece = 0; piece < num_pieces(u); ++piece) {
    ZERO_ASSIGN_OR_RETURN(int staging, take_staging());
    const int64_t n = piece_numel(u, piece);
    std::byte* dst = staging_[static_cast<size_t>(staging)].get();
    if (as_is) {
      std::memcpy(dst, static_cast<const std::byte*>(values) + piece * staging_numel_ * elem_bytes_,
                  static_cast<size_t>(n) * elem_bytes_);
    } else {
      convert_from_f32(static_cast<const float*>(values) + piece * staging_numel_, dst, dtype_,
                       static_cast<size_t>(n));
    }
    const uint64_t offset = unit.offset_bytes + static_cast<uint64_t>(piece) *
                                                    static_cast<uint64_t>(staging_numel_) *
                                                    elem_bytes_;
    auto t = swapper_->submit_write(kParamClass, offset, static_cast<size_t>(n) * elem_bytes_, dst);
    if (!t.ok()) {
      free_staging_.push_back(staging);
      return t.status().with_context(fmt::format("writing the parameter shard of unit {}", u));
    }
    in_flight_.push_back({u, piece, staging, t->id, /*is_write=*/true});
    unit.writes_pending += 1;
    pieces_written_ += 1;
  }
  return ok_status();
}

Status ParamStore::flush() {
  Status first = ok_status();
  // Complete writes (and any reads queued before them) until no write is in flight.
  while (std::any_of(in_flight_.begin(), in_flight_.end(),
                     [](const InFlight& op) { return op.is_write; })) {
    Status s = complete_oldest();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

}  // namespace zero::sharding
