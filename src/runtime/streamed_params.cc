// ZeRO-Inference's weight stream (runtime/streamed_params.h).
#include "runtime/streamed_params.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "core/check.h"
#include "offload/nvme_swapper.h"
#include "sharding/shard_layout.h"

namespace zero::runtime {
namespace {

constexpr int kMinSlots = 2;  // one computing, one being copied: double buffering
constexpr const char* kSwapClass = "inference_blocks";
// The GEMM workspace (kernels/matmul/matmul_cuda.h: 32 MiB) and the CUDA context's slack.
constexpr int64_t kFixedScratchBytes = int64_t{64} << 20;

TensorView view_of(void* data, DType dtype, int64_t numel, Device device) {
  return TensorView{data, dtype, Shape{numel}, device};
}

// "1.50 GiB" / "12.3 MiB": a size for people beside the exact bytes.
std::string human_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", b / (1 << 30));
  return fmt::format("{:.1f} MiB", b / (1 << 20));
}

// What other_bytes holds, for a message: nothing counted yet (an early check) or its bytes.
std::string other_text(int64_t other_bytes) {
  if (other_bytes == 0) return "before the key/value cache and scratch";
  return fmt::format("{} bytes of key/value cache and scratch", other_bytes);
}

}  // namespace

StatusOr<ParamOffload> parse_param_offload(std::string_view text) {
  if (text == "none") return ParamOffload::kNone;
  if (text == "cpu") return ParamOffload::kCpu;
  if (text == "nvme") return ParamOffload::kNvme;
  return invalid_argument("'{}': expected none, cpu or nvme", text);
}

const char* param_offload_name(ParamOffload offload) {
  switch (offload) {
    case ParamOffload::kNone: return "none";
    case ParamOffload::kCpu: return "cpu";
    case ParamOffload::kNvme: return "nvme";
  }
  return "?";
}

int64_t kv_cache_bytes(const model::ModelConfig& c, int64_t capacity, int64_t slots,
                       DType cache_dtype) {
  return 2 * c.num_layers * slots * capacity * c.num_kv_heads * c.head_dim() *
         static_cast<int64_t>(dtype_bytes(cache_dtype));
}

int64_t decode_scratch_bytes(const model::ModelConfig& c, int64_t rows, int64_t slots,
                             DType dtype) {
  const int64_t C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size;
  const int64_t HqD = c.num_heads * c.head_dim(), kv = c.num_kv_heads * c.head_dim();
  // Per row (floats): the norms, q / k / v and their rotations, the post-norms, the MLP's four
  // (n, F), the residual stream ping-pong, new keys / values, RoPE rows; the 16-bit GEMM operand
  // copy (half a float per element of the widest input).
  const int64_t widest = std::max({C, F, HqD}) + 8;
  const int64_t per_row =
      10 * C + 5 * F + 4 * HqD + 4 * kv + c.num_heads + 2 * c.head_dim() + 8 + widest / 2 + 1;
  // Per slot: the last row, its final norm and statistics, its logits (rounded up to 8).
  const int64_t per_slot = 2 * C + 2 + (V + 7) / 8 * 8;
  int64_t widen = 0;
  if (dtype != DType::kF32) {
    // A 16-bit unit's small parameters widened to fp32: the embedding unit's and the largest
    // other's (model::CudaTransformer::widen_bytes, counted here without the CUDA headers).
    const model::ModelLayout layout(c);
    int64_t emb = 0, largest = 0;
    for (int u = 0; u < layout.num_units(); ++u) {
      int64_t n = 0;
      for (const model::ParamSpec& p : layout.unit(u).params) {
        n += model::is_matrix_or_embedding(p.kind) ? 0 : p.numel();
      }
      if (u == layout.embedding_unit()) {
        emb = n;
      } else {
        largest = std::max(largest, n);
      }
    }
    widen = (emb + largest) * 4;
  }
  return (rows * per_row + slots * per_slot) * 4 + widen + kFixedScratchBytes;
}

int64_t forward_scratch_bytes(const model::ModelConfig& c, int64_t B, int64_t T, DType dtype) {
  const int64_t N = B * T;
  const int64_t residual = (c.num_layers + 1) * N * c.hidden_size * 4;
  const int64_t logits = N * ((c.vocab_size + 7) / 8 * 8) * 4;
  // One block's activations and the backward's buffers: twice the decoder's rows.
  return residual + logits + 2 * decode_scratch_bytes(c, N, B, dtype);
}

int64_t WeightStreamPlan::device_bytes() const {
  const int64_t shards_on_device =
      partitioned() && offload == ParamOffload::kNone ? shard_bytes : 0;
  return resident_bytes + slots * block_bytes + other_bytes + shards_on_device;
}

std::string WeightStreamPlan::describe(Device device) const {
  if (device == Device::kCpu) {
    if (!streamed()) return fmt::format("weights in host memory ({} bytes)", device_bytes());
    return fmt::format(
        "blocks streamed from nvme through {} host slots of {} bytes ({} of {} blocks at once); "
        "{} resident bytes",
        slots, block_bytes, slots, num_blocks, resident_bytes);
  }
  const std::string budget_text =
      budget ? fmt::format(" under --max_gpu_memory {} ({})", *budget, human_bytes(*budget)) : "";
  if (partitioned()) {
    const char* home = offload == ParamOffload::kCpu    ? "in pinned host memory"
                       : offload == ParamOffload::kNvme ? "in its own swap file (nvme)"
                                                        : "on its device";
    return fmt::format(
        "per rank (rank {} of {}): a 1/{} shard of every block {} ({} bytes), each block "
        "all-gathered into one of {} device slots of {} bytes ({} of {} blocks at once); {} bytes "
        "of whole units (embeddings, final norm, head); {} bytes ({}) planned with the key/value "
        "cache and scratch{}",
        rank, world_size, world_size, home, shard_bytes, slots, block_bytes, slots, num_blocks,
        resident_bytes, device_bytes(), human_bytes(device_bytes()), budget_text);
  }
  if (!streamed()) {
    return fmt::format(
        "weights resident on the device ({} blocks of {} bytes and {} other bytes); {} bytes ({}) "
        "planned with the key/value cache and scratch{}",
        num_blocks, block_bytes, resident_bytes, device_bytes(), human_bytes(device_bytes()),
        budget_text);
  }
  return fmt::format(
      "blocks streamed from {} through {} device slots of {} bytes ({} of {} blocks at once); {} "
      "resident bytes; {} bytes ({}) planned with the key/value cache and scratch{}",
      offload == ParamOffload::kNvme ? "nvme" : "pinned cpu memory", slots, block_bytes, slots,
      num_blocks, resident_bytes, device_bytes(), human_bytes(device_bytes()), budget_text);
}

StatusOr<WeightStreamPlan> plan_weight_stream(const model::ModelLayout& layout, DType dtype,
                                              ParamOffload offload, std::optional<int64_t> budget,
                                              int64_t other_bytes) {
  WeightStreamPlan p;
  p.offload = offload;
  p.budget = budget;
  p.other_bytes = other_bytes;
  const model::ModelConfig& c = layout.config();
  p.num_blocks = static_cast<int>(c.num_layers);
  const int64_t elem = static_cast<int64_t>(dtype_bytes(dtype));
  for (int u = 0; u < layout.num_units(); ++u) {
    const int64_t bytes = layout.unit(u).numel * elem;
    const bool block = u != layout.embedding_unit() && u != layout.final_unit();
    if (block) {
      p.block_bytes = std::max(p.block_bytes, bytes);
    } else {
      p.resident_bytes += bytes;
    }
  }
  const int64_t all_resident = p.resident_bytes + p.num_blocks * p.block_bytes + other_bytes;
  if (offload == ParamOffload::kNone || p.num_blocks <= kMinSlots) {
    p.offload = ParamOffload::kNone;
    p.slots = p.num_blocks;
    if (budget && *budget < all_resident) {
      const int64_t streamed_min = p.resident_bytes + kMinSlots * p.block_bytes + other_bytes;
      return invalid_argument(
          "--max_gpu_memory {} is too small for the resident weights: {} bytes needed ({} of "
          "weights, {}){}",
          *budget, all_resident, all_resident - other_bytes, other_text(other_bytes),
          offload == ParamOffload::kNone && p.num_blocks > kMinSlots
              ? fmt::format("; --offload_param cpu or nvme streams the blocks in {} bytes",
                            streamed_min)
              : "");
    }
    return p;
  }
  if (!budget) {
    p.slots = kMinSlots;
    return p;
  }
  const int64_t fixed = p.resident_bytes + other_bytes;
  const int64_t fit = *budget > fixed ? (*budget - fixed) / std::max<int64_t>(p.block_bytes, 1) : 0;
  if (fit < kMinSlots) {
    return invalid_argument(
        "--max_gpu_memory {} is too small to stream the blocks: {} bytes needed ({} resident "
        "weight bytes, {} block slots of {} bytes, {})",
        *budget, fixed + kMinSlots * p.block_bytes, p.resident_bytes, kMinSlots, p.block_bytes,
        other_text(other_bytes));
  }
  if (fit >= p.num_blocks) {
    p.offload = ParamOffload::kNone;
    p.slots = p.num_blocks;
  } else {
    p.slots = static_cast<int>(fit);
  }
  return p;
}

StatusOr<WeightStreamPlan> plan_partitioned_weights(const model::ModelLayout& layout, DType dtype,
                                                    ParamOffload offload,
                                                    std::optional<int64_t> budget,
                                                    int64_t other_bytes, int world_size, int rank) {
  WeightStreamPlan p;
  p.offload = offload;
  p.budget = budget;
  p.other_bytes = other_bytes;
  p.world_size = world_size;
  p.rank = rank;
  p.num_blocks = static_cast<int>(layout.config().num_layers);
  const sharding::ShardLayout shards(layout, world_size, rank);
  const int64_t elem = static_cast<int64_t>(dtype_bytes(dtype));
  for (int u = 0; u < layout.num_units(); ++u) {
    if (u == layout.embedding_unit() || u == layout.final_unit()) {
      p.resident_bytes += layout.unit(u).numel * elem;
      continue;
    }
    // A slot receives the whole padded block: every rank's shard, padding included.
    p.block_bytes = std::max(p.block_bytes, shards.unit(u).padded_numel * elem);
    p.shard_bytes += shards.unit(u).shard_numel * elem;
    p.max_shard_bytes = std::max(p.max_shard_bytes, shards.unit(u).shard_numel * elem);
  }
  const int min_slots = std::min(kMinSlots, p.num_blocks);
  p.slots = min_slots;
  if (!budget) return p;
  const int64_t shards_on_device = offload == ParamOffload::kNone ? p.shard_bytes : 0;
  const int64_t fixed = p.resident_bytes + other_bytes + shards_on_device;
  const int64_t fit = *budget > fixed ? (*budget - fixed) / std::max<int64_t>(p.block_bytes, 1) : 0;
  if (fit < min_slots) {
    return invalid_argument(
        "--max_gpu_memory {} is too small for rank {} of {}: {} bytes needed ({} bytes of whole "
        "units, {} of its block shards on the device, {} gather slots of {} bytes, {}){}",
        *budget, rank, world_size, fixed + min_slots * p.block_bytes, p.resident_bytes,
        shards_on_device, min_slots, p.block_bytes, other_text(other_bytes),
        offload == ParamOffload::kNone
            ? fmt::format("; --offload_param cpu or nvme keeps the shards off the device: {} bytes",
                          fixed - shards_on_device + min_slots * p.block_bytes)
            : "");
  }
  p.slots = static_cast<int>(std::min<int64_t>(fit, p.num_blocks));
  return p;
}

StreamedParams::StreamedParams(const model::ModelLayout& layout, model::ParamAccess& host,
                               device::ExecutionContext& ctx, const Options& options)
    : layout_(layout), host_(host), ctx_(ctx), options_(options) {}

StatusOr<std::unique_ptr<StreamedParams>> StreamedParams::create(const model::ModelLayout& layout,
                                                                 model::ParamAccess& host,
                                                                 const FillUnitFn& fill_block,
                                                                 device::ExecutionContext& ctx,
                                                                 const Options& options) {
  const int L = static_cast<int>(layout.config().num_layers);
  const bool partitioned = options.gather != nullptr;
  if (partitioned ? options.slots < 1
                  : options.offload == ParamOffload::kNone || options.slots < kMinSlots ||
                        options.slots >= L) {
    return invalid_argument("a weight stream of {} slots from {}{} for {} blocks", options.slots,
                            param_offload_name(options.offload),
                            partitioned ? " with gathered blocks" : "", L);
  }
  std::unique_ptr<StreamedParams> p(new StreamedParams(layout, host, ctx, options));
  p->num_blocks_ = L;
  p->layer_of_unit_.assign(static_cast<size_t>(layout.num_units()), -1);
  p->resident_.resize(static_cast<size_t>(layout.num_units()));
  // Partitioned: a slot receives the whole padded block (every rank's shard, padding included).
  std::optional<sharding::ShardLayout> shards;
  if (partitioned) {
    shards.emplace(layout, options.gather->comm().world_size(), options.gather->comm().rank());
  }
  const int64_t elem = static_cast<int64_t>(dtype_bytes(options.dtype));
  int64_t staging_numel = 0;  // nvme: the largest block, or partitioned the largest shard
  for (int l = 0; l < L; ++l) {
    const int u = layout.block_unit(l);
    p->layer_of_unit_[static_cast<size_t>(u)] = l;
    p->block_numel_.push_back(layout.unit(u).numel);
    const int64_t slot_numel = shards ? shards->unit(u).padded_numel : layout.unit(u).numel;
    p->block_bytes_ = std::max(p->block_bytes_, slot_numel * elem);
    if (shards) {
      p->shard_numel_.push_back(shards->unit(u).shard_numel);
      p->shard_begin_.push_back(shards->shard_begin(u));
    }
    staging_numel = std::max(staging_numel, shards ? shards->unit(u).shard_numel : slot_numel);
  }
  device::Backend& backend = ctx.backend();
  p->copy_ = backend.create_stream(partitioned ? "weights gathered" : "weights h2d");
  const int64_t slot_numel = p->block_bytes_ / elem;
  const int num_slots = partitioned ? std::min(options.slots, L) : options.slots;
  for (int s = 0; s < num_slots; ++s) {
    Slot slot;
    ZERO_ASSIGN_OR_RETURN(slot.device, backend.allocate(options.dtype, slot_numel));
    if (options.offload == ParamOffload::kNvme) {
      ZERO_ASSIGN_OR_RETURN(slot.staging, backend.allocate_host(options.dtype, staging_numel));
    }
    slot.loaded = backend.create_event();
    slot.freed = backend.create_event();
    slot.staged = backend.create_event();
    p->slots_.push_back(std::move(slot));
  }
  ZERO_RETURN_IF_ERROR(partitioned ? p->store_shards(fill_block) : p->store_blocks(fill_block));
  return p;
}

Status StreamedParams::store_blocks(const FillUnitFn& fill_block) {
  device::Backend& backend = ctx_.backend();
  const DType dtype = options_.dtype;
  if (options_.offload == ParamOffload::kCpu) {
    // Each block straight into its pinned buffer: the host never holds a second copy.
    for (int l = 0; l < num_blocks_; ++l) {
      const int64_t numel = block_numel_[static_cast<size_t>(l)];
      ZERO_ASSIGN_OR_RETURN(device::DeviceBuffer buf, backend.allocate_host(dtype, numel));
      ZERO_RETURN_IF_ERROR(fill_block(layout_.block_unit(l), 0, numel, buf.data()));
      pinned_.push_back(std::move(buf));
    }
    return ok_status();
  }
  return write_swap(block_numel_, [&](int l, void* dst) {
    return fill_block(layout_.block_unit(l), 0, block_numel_[static_cast<size_t>(l)], dst);
  });
}

Status StreamedParams::write_swap(const std::vector<int64_t>& numel,
                                  const std::function<Status(int layer, void* dst)>& fill) {
  // Every block (or shard) written once through the first slot's staging buffer, at offsets the
  // swapper's alignment allows, into one file of a per-run directory under nvme_path.
  offload::NvmeSwapperOptions so;
  so.nvme_path = options_.nvme_path;
  // Partitioned: each rank's directory and file carry its rank (what a peer's leftovers say).
  so.rank = options_.gather != nullptr ? options_.gather->comm().rank() : 0;
  so.fault_hook = options_.fault_hook;
  so.aio = options_.aio;
  ZERO_ASSIGN_OR_RETURN(swapper_, offload::NvmeSwapper::create(so));
  uint64_t total = 0;
  const size_t elem = dtype_bytes(options_.dtype);
  for (int l = 0; l < num_blocks_; ++l) {
    file_offset_.push_back(total);
    total += offload::NvmeSwapper::slot_bytes(static_cast<uint64_t>(numel[static_cast<size_t>(l)]) *
                                              elem);
  }
  ZERO_RETURN_IF_ERROR(swapper_->add_file(kSwapClass, total));
  void* staging = slots_[0].staging.data();
  for (int l = 0; l < num_blocks_; ++l) {
    ZERO_RETURN_IF_ERROR(fill(l, staging));
    ZERO_RETURN_IF_ERROR(swapper_->write(kSwapClass, file_offset_[static_cast<size_t>(l)],
                                         static_cast<size_t>(numel[static_cast<size_t>(l)]) * elem,
                                         staging));
  }
  return ok_status();
}

Status StreamedParams::store_shards(const FillUnitFn& fill_block) {
  device::Backend& backend = ctx_.backend();
  const DType dtype = options_.dtype;
  const size_t elem = dtype_bytes(dtype);
  // The shard's real elements from the checkpoint; past the block's end, padding (zeros: the
  // gathered slot's tail, which no kernel reads).
  auto fill_shard = [&](int l, void* dst) -> Status {
    const size_t i = static_cast<size_t>(l);
    const int64_t numel = shard_numel_[i];
    const int64_t begin = std::min(shard_begin_[i], block_numel_[i]);
    const int64_t end = std::min(begin + numel, block_numel_[i]);
    std::memset(dst, 0, static_cast<size_t>(numel) * elem);
    if (end > begin) return fill_block(layout_.block_unit(l), begin, end, dst);
    return ok_status();
  };
  if (options_.offload == ParamOffload::kCpu) {
    // ZeRO-Infinity's offload_param cpu: each shard straight into its pinned buffer.
    for (int l = 0; l < num_blocks_; ++l) {
      ZERO_ASSIGN_OR_RETURN(device::DeviceBuffer buf,
                            backend.allocate_host(dtype, shard_numel_[static_cast<size_t>(l)]));
      ZERO_RETURN_IF_ERROR(fill_shard(l, buf.data()));
      pinned_.push_back(std::move(buf));
    }
    return ok_status();
  }
  if (options_.offload == ParamOffload::kNvme) return write_swap(shard_numel_, fill_shard);
  int64_t staging_numel = 0;
  for (int64_t n : shard_numel_) staging_numel = std::max(staging_numel, n);
  ZERO_ASSIGN_OR_RETURN(device::DeviceBuffer staging, backend.allocate_host(dtype, staging_numel));
  for (int l = 0; l < num_blocks_; ++l) {
    const int64_t numel = shard_numel_[static_cast<size_t>(l)];
    ZERO_ASSIGN_OR_RETURN(device::DeviceBuffer shard, backend.allocate(dtype, numel));
    ZERO_RETURN_IF_ERROR(fill_shard(l, staging.data()));
    backend.transfer(*copy_, shard.view(), view_of(staging.data(), dtype, numel, Device::kCpu));
    // Why a host wait (once per block, at load): the staging buffer is refilled for the next one.
    ZERO_RETURN_IF_ERROR(copy_->synchronize());
    shards_.push_back(std::move(shard));
  }
  return ok_status();
}

StreamedParams::~StreamedParams() {
  // Why host waits: queued kernels read the slots, queued copies (and the host functions waiting
  // for NVMe reads) write them and read the staging buffers freed below; a gather still in flight
  // (the next forward's first blocks, prefetched) writes a slot and reads a shard.
  (void)ctx_.compute().synchronize();
  if (copy_ != nullptr) (void)copy_->synchronize();
  if (swapper_ != nullptr) (void)swapper_->wait_all();
  std::lock_guard<std::mutex> lock(error_mu_);
  check_gathers(/*wait=*/true);
}

void StreamedParams::note_error(const Status& s) {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (status_.ok()) status_ = s;
}

Status StreamedParams::status() const {
  std::lock_guard<std::mutex> lock(error_mu_);
  check_gathers(/*wait=*/false);
  return status_;
}

void StreamedParams::check_gathers(bool wait) const {
  // In issue order: the communicator completes them in that order (one FIFO).
  auto first_pending = std::find_if(gathers_.begin(), gathers_.end(),
                                    [wait](const auto& g) { return !wait && !g.handle.done(); });
  for (auto it = gathers_.begin(); it != first_pending; ++it) {
    const Status s = it->handle.wait();
    if (!s.ok() && status_.ok()) {
      status_ = s.with_context(fmt::format("gathering block {}", it->layer));
    }
  }
  gathers_.erase(gathers_.begin(), first_pending);
}

void StreamedParams::load(int layer, Slot& slot) {
  if (options_.gather != nullptr) {
    gather(layer, slot);
  } else {
    // The copy overwrites the slot once the kernels reading its previous block have run.
    copy_->wait(*slot.freed);
    const size_t l = static_cast<size_t>(layer);
    const int64_t numel = block_numel_[l];
    const TensorView dst = view_of(slot.device.data(), options_.dtype, numel, ctx_.device());
    if (options_.offload == ParamOffload::kCpu) {
      ctx_.backend().transfer(*copy_, dst,
                              view_of(pinned_[l].data(), options_.dtype, numel, Device::kCpu));
    } else {
      read_nvme(layer, slot);
      ctx_.backend().transfer(*copy_, dst,
                              view_of(slot.staging.data(), options_.dtype, numel, Device::kCpu));
    }
  }
  copy_->record(*slot.loaded);
  slot.layer = layer;
  ++blocks_copied_;
}

void StreamedParams::read_nvme(int layer, Slot& slot) {
  const size_t l = static_cast<size_t>(layer);
  // Why a host wait: the staging buffer is read by the slot's previous copy (long done: it was
  // queued slots - 1 blocks ago) and must not be overwritten before it ran.
  slot.loaded->synchronize();
  const int64_t numel = options_.gather != nullptr ? shard_numel_[l] : block_numel_[l];
  const size_t bytes = static_cast<size_t>(numel) * dtype_bytes(options_.dtype);
  StatusOr<offload::Ticket> ticket =
      swapper_->submit_read(kSwapClass, file_offset_[l], bytes, slot.staging.data());
  if (!ticket.ok()) {
    note_error(ticket.status().with_context(fmt::format("reading block {} back", layer)));
    return;
  }
  // The copy stream waits on the host for the read (io_uring runs it meanwhile, while the
  // compute stream works through the blocks before it).
  offload::NvmeSwapper* swapper = swapper_.get();
  const offload::Ticket t = *ticket;
  ctx_.backend().host_function(*copy_, [this, swapper, t, layer] {
    Status s = swapper->wait(t);
    if (!s.ok()) note_error(s.with_context(fmt::format("reading block {} back", layer)));
  });
}

void StreamedParams::gather(int layer, Slot& slot) {
  const size_t l = static_cast<size_t>(layer);
  CollectiveCall call;
  call.kind = CommKind::kAllGather;
  call.dtype = options_.dtype;
  call.in = shards_.empty() ? nullptr : shards_[l].data();
  call.out = slot.device.data();
  call.numel = static_cast<size_t>(shard_numel_[l]);
  // The gather overwrites the slot once the kernels reading its previous block have run (`freed`,
  // recorded on the compute stream), on the communicator's side; the copy stream carries its end
  // to `loaded`, which acquire() makes the compute stream wait for.
  const device::Event* ready = slot.freed.get();
  if (options_.offload != ParamOffload::kNone) {
    // The shard lives in host memory or NVMe: copied up into this rank's own block of the slot
    // (after the kernels reading the slot's previous block), then gathered in place.
    const TensorView own =
        view_of(static_cast<char*>(slot.device.data()) +
                    static_cast<size_t>(shard_begin_[l]) * dtype_bytes(options_.dtype),
                options_.dtype, shard_numel_[l], ctx_.device());
    copy_->wait(*slot.freed);
    void* host = nullptr;
    if (options_.offload == ParamOffload::kCpu) {
      host = pinned_[l].data();
    } else {
      read_nvme(layer, slot);
      host = slot.staging.data();
    }
    ctx_.backend().transfer(*copy_, own,
                            view_of(host, options_.dtype, shard_numel_[l], Device::kCpu));
    copy_->record(*slot.staged);
    ready = slot.staged.get();
    call.in = own.data;
  }
  device::OrderedCollective issued = options_.gather->issue(*ready, {&call, 1});
  copy_->wait(*issued.done);
  std::lock_guard<std::mutex> lock(error_mu_);
  check_gathers(/*wait=*/false);
  gathers_.push_back({std::move(issued.handle), layer});
}

StreamedParams::Slot& StreamedParams::ensure_window(int layer) {
  const int S = static_cast<int>(slots_.size());
  auto wanted = [&](int l) { return (l - layer + num_blocks_) % num_blocks_ < S; };
  Slot* current = nullptr;
  for (int k = 0; k < S; ++k) {
    const int l = (layer + k) % num_blocks_;
    auto present =
        std::find_if(slots_.begin(), slots_.end(), [&](const Slot& s) { return s.layer == l; });
    if (present == slots_.end()) {
      auto free = std::find_if(slots_.begin(), slots_.end(), [&](const Slot& s) {
        return !s.in_use && (s.layer < 0 || !wanted(s.layer));
      });
      ZERO_CHECK(free != slots_.end(), "weight stream: no free slot for block ", l);
      load(l, *free);
      present = free;
    }
    if (k == 0) current = &*present;
  }
  return *current;
}

model::ParamView StreamedParams::acquire(int u) {
  const int layer = layer_of_unit_[static_cast<size_t>(u)];
  if (layer < 0) {
    const model::ParamView hv = host_.acquire(u);
    // The CPU backend's device memory is host memory: the host's unit as it is, no second copy.
    if (ctx_.device() == Device::kCpu) return hv;
    device::DeviceBuffer& buf = resident_[static_cast<size_t>(u)];
    if (buf.data() == nullptr) {
      StatusOr<device::DeviceBuffer> fresh = ctx_.backend().allocate(hv.dtype, hv.numel);
      ZERO_CHECK(fresh.ok(), "weight stream: resident unit ", u, ": ", fresh.status().to_string());
      buf = std::move(*fresh);
      ctx_.backend().transfer(
          ctx_.compute(), view_of(buf.data(), hv.dtype, hv.numel, ctx_.device()),
          view_of(const_cast<void*>(hv.data), hv.dtype, hv.numel, Device::kCpu));
      // Why a host wait (once per unit): the host unit may be pageable and is released below.
      (void)ctx_.compute().synchronize();
    }
    host_.release(u);
    return model::ParamView{buf.data(), hv.dtype, ctx_.device(), hv.numel};
  }
  Slot& slot = ensure_window(layer);
  ZERO_CHECK(!slot.in_use, "weight stream: block ", layer, " acquired twice");
  slot.in_use = true;
  // The block's kernels start once its copy has landed.
  ctx_.compute().wait(*slot.loaded);
  return model::ParamView{slot.device.data(), options_.dtype, ctx_.device(),
                          block_numel_[static_cast<size_t>(layer)]};
}

void StreamedParams::release(int u) {
  const int layer = layer_of_unit_[static_cast<size_t>(u)];
  if (layer < 0) {
    if (ctx_.device() == Device::kCpu) host_.release(u);  // acquire handed out the host's view
    return;
  }
  for (Slot& s : slots_) {
    if (s.layer == layer && s.in_use) {
      ctx_.compute().record(*s.freed);
      s.in_use = false;
      return;
    }
  }
  ZERO_CHECK(false, "weight stream: block ", layer, " released without being acquired");
}

int64_t StreamedParams::device_bytes() const {
  int64_t n = 0;
  for (const device::DeviceBuffer& b : resident_) n += static_cast<int64_t>(b.view().nbytes());
  for (const Slot& s : slots_) n += static_cast<int64_t>(s.device.view().nbytes());
  return n + shard_bytes();
}

int64_t StreamedParams::shard_bytes() const {
  int64_t n = 0;
  for (const device::DeviceBuffer& b : shards_) n += static_cast<int64_t>(b.view().nbytes());
  return n;
}

int64_t StreamedParams::host_bytes() const {
  int64_t n = 0;
  for (const device::DeviceBuffer& b : pinned_) n += static_cast<int64_t>(b.view().nbytes());
  // A slot without staging (cpu) holds an empty buffer, whose default view counts one element.
  for (const Slot& s : slots_) {
    if (s.staging.data() != nullptr) n += static_cast<int64_t>(s.staging.view().nbytes());
  }
  return n;
}

std::string StreamedParams::swap_dir() const {
  if (swapper_ == nullptr) return "";
  const std::string file = swapper_->file_path(kSwapClass);
  return file.substr(0, file.find_last_of('/'));
}

}  // namespace zero::runtime
