// ZeRO-Inference's weight stream (offload_param for `zero generate` / `zero eval`): the embeddings,
// final norm and head stay resident on the device; the transformer blocks live in pinned host
// memory (cpu) or in a swap file under nvme_path (nvme, read back with the NVMe swapper's io_uring
// into pinned staging buffers) and pass through a few device block slots. While block l computes,
// blocks l+1 .. l+slots-1 (cyclically: past the last block come the next forward's first ones) are
// copied into the other slots on a copy stream, ordered by events, so every block is copied once
// per forward, whatever the batch. plan_weight_stream decides, before anything is allocated, how
// many slots a device budget allows (all of them: everything resident, today's path).
// Stage-3 inference on several GPU ranks takes the same slots with another home for the blocks:
// each rank holds its 1/N shard of every block in device memory, and a slot is filled by
// all-gathering the block from the ranks' shards (device/stream_collectives.h: NCCL, or the host
// communicator staged through pinned memory) instead of copying it from host memory or NVMe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/status.h"
#include "device/backend.h"
#include "device/stream_collectives.h"
#include "model/model_config.h"
#include "model/param_access.h"
#include "model/param_layout.h"
#include "offload/aio_config.h"
#include "runtime/generate.h"

namespace zero::offload {
class NvmeSwapper;
class NvmeFaultHook;
}  // namespace zero::offload

namespace zero::runtime {

// Where the blocks' weights live between their uses.
enum class ParamOffload {
  kNone,  // resident on the device
  kCpu,   // pinned host memory
  kNvme,  // a swap file under nvme_path
};
// "none" | "cpu" | "nvme" (DeepSpeed's offload_param.device); otherwise an error naming the text
// ("'disk': expected none, cpu or nvme"; the caller prefixes the flag or key).
StatusOr<ParamOffload> parse_param_offload(std::string_view text);
const char* param_offload_name(ParamOffload offload);

// Device bytes of a key/value cache of `capacity` positions for each of `slots` sequences:
// 2 * L * slots * capacity * Hkv * D elements of cache_dtype (model::CudaKvDecoder::cache_bytes).
int64_t kv_cache_bytes(const model::ModelConfig& config, int64_t capacity, int64_t slots,
                       DType cache_dtype);
// An upper bound of the CUDA decoder's and model's scratch for appends of up to `rows` rows over
// `slots` sequences of a `dtype` model: the block's intermediates and the residual stream per row,
// the last rows' logits, the 16-bit units' fp32 widen buffers (a unit's norms and biases) and the
// GEMM workspace (kept at 64 MiB).
int64_t decode_scratch_bytes(const model::ModelConfig& config, int64_t rows, int64_t slots,
                             DType dtype);

// An estimate of the CUDA model's memory for a forward over (B, T) with activation checkpointing
// (what `zero eval` runs on a GPU): the residual stream at every block boundary, one block's
// activations and the backward's buffers (carved with them), the logits, and
// decode_scratch_bytes' fixed part.
int64_t forward_scratch_bytes(const model::ModelConfig& config, int64_t B, int64_t T, DType dtype);

// How a model's weights sit in device memory.
struct WeightStreamPlan {
  ParamOffload offload = ParamOffload::kNone;  // kNone when everything is resident
  int num_blocks = 0;
  int slots = 0;                  // device block slots; num_blocks when resident
  int64_t resident_bytes = 0;     // the units that are not blocks: embeddings, final norm, head
  int64_t block_bytes = 0;        // the largest block (one slot)
  int64_t other_bytes = 0;        // what the caller counted beside the weights (cache, scratch)
  std::optional<int64_t> budget;  // --max_gpu_memory
  // Stage-3 inference on several ranks (plan_partitioned_weights): each block is all-gathered from
  // the ranks' shards into one of `slots` slots of block_bytes (the padded block); this rank's
  // shards live on its device (offload kNone), in pinned host memory (cpu) or its own swap file
  // (nvme). One rank's plan: the budgets are per rank.
  int world_size = 1;
  int rank = 0;
  int64_t shard_bytes = 0;      // this rank's shards of every block
  int64_t max_shard_bytes = 0;  // the largest (nvme: each slot's pinned staging buffer)
  bool partitioned() const { return world_size > 1; }
  bool streamed() const { return slots < num_blocks; }
  // resident_bytes + slots * block_bytes + other_bytes (+ shard_bytes: partitioned, kNone).
  int64_t device_bytes() const;
  // One line for stderr: where the weights live on `device`, the slots and the bytes.
  std::string describe(Device device) const;
};

// The plan of a `dtype` model of `layout` under an optional device budget, with `other_bytes` of
// the device going to the key/value cache and scratch. No budget: resident for kNone, two slots
// (double buffering) for cpu / nvme. A budget: as many slots as it holds beside the resident
// units and other_bytes, all of them (resident) when every block fits. Errors (INVALID_ARGUMENT,
// one line naming the bytes needed and given): a budget below two slots' worth; with kNone, a
// budget below everything resident (naming --offload_param).
StatusOr<WeightStreamPlan> plan_weight_stream(const model::ModelLayout& layout, DType dtype,
                                              ParamOffload offload, std::optional<int64_t> budget,
                                              int64_t other_bytes);

// One rank's plan of stage-3 inference on `world_size` ranks: the units that are not blocks whole
// (resident_bytes), this rank's ShardLayout shard of every block where `offload` puts it, and each
// block gathered into a slot of the padded block's bytes. No budget: two slots (one block ahead;
// one for a single block). A budget: as many slots as it holds beside the whole units, the shards
// kept on the device (kNone) and other_bytes, at most one per block (each gathered once and kept).
// Errors (INVALID_ARGUMENT, one line naming the budget, the rank and the bytes needed): a budget
// below two slots' worth (with kNone, naming what --offload_param cpu / nvme would need).
StatusOr<WeightStreamPlan> plan_partitioned_weights(const model::ModelLayout& layout, DType dtype,
                                                    ParamOffload offload,
                                                    std::optional<int64_t> budget,
                                                    int64_t other_bytes, int world_size, int rank);

// The device's ParamAccess of a streamed plan. Units that are not blocks come from `host` (in host
// memory; not owned, must outlive this) and are copied once, on first acquire, and kept. Blocks
// are filled once at create() with `fill_block` (their values in the host weights' dtype) into
// pinned host buffers, the swap file, or (partitioned over `gather`'s ranks) this rank's device
// shards, and streamed through the slots on acquire.
//
// Stream contract: acquire(block) makes the compute stream wait for the block's copy or gather
// (the host does not wait, except to reuse an NVMe staging buffer); release(block) marks, on the
// compute stream, the point after which its slot may be overwritten, so call it once the kernels
// reading the block are enqueued (the model's contract). At most one block is acquired at a time,
// blocks in increasing order within a forward (the models' order). Partitioned: the gathers are
// collectives, so every rank acquires the same blocks in the same order (the same forwards). Not
// thread safe.
class StreamedParams final : public model::ParamAccess {
 public:
  // Elements [begin, end) of unit u (unit-flat, end <= numel) in the weights' dtype into dst:
  // the whole unit for cpu / nvme, this rank's shard of it (its real elements) when partitioned.
  using FillUnitFn = std::function<Status(int u, int64_t begin, int64_t end, void* dst)>;
  struct Options {
    // kCpu or kNvme: where the blocks live; kNone with `gather`: partitioned over its ranks.
    ParamOffload offload = ParamOffload::kCpu;
    int slots = 2;                                 // >= 2, < num_blocks (partitioned: >= 1)
    DType dtype = DType::kF32;                     // the weights' (host's) dtype
    std::string nvme_path;                         // kNvme: a per-run directory is made under it
    offload::AioConfig aio;                        // kNvme: the swapper's I/O settings
    offload::NvmeFaultHook* fault_hook = nullptr;  // kNvme, tests: fails chosen I/O (not owned)
    // Stage-3 inference on several ranks: each rank holds its shard of every block (ZeRO-3's
    // sharding::ShardLayout over gather's ranks) in device memory (offload kNone), or with
    // offload cpu / nvme in pinned host memory / its own swap file (ZeRO-Infinity: copied up into
    // its own block of the slot first), and a slot is filled by all-gathering the block into it,
    // issued when the slot's previous block was released (not owned; outlives this; on ctx's
    // device). Slots beyond the blocks are not made: with as many as blocks each is gathered
    // once and kept.
    device::StreamCollectives* gather = nullptr;
  };
  // Errors: pinned or device memory refused (naming the bytes), the swap file's creation or writes,
  // fill_block's error.
  static StatusOr<std::unique_ptr<StreamedParams>> create(const model::ModelLayout& layout,
                                                          model::ParamAccess& host,
                                                          const FillUnitFn& fill_block,
                                                          device::ExecutionContext& ctx,
                                                          const Options& options);
  // Waits for the streams (queued copies and kernels use the slots), then frees them; the swap
  // file and its directory are removed.
  ~StreamedParams() override;
  StreamedParams(const StreamedParams&) = delete;
  StreamedParams& operator=(const StreamedParams&) = delete;

  model::ParamView acquire(int u) override;
  void release(int u) override;

  // The first error of a block's NVMe read or gather (the forwards after it read stale slots: the
  // caller checks this before trusting a step's output). OK for cpu. Never blocks: a gather still
  // in flight is checked by a later call.
  Status status() const;
  // Blocks copied (or gathered) into a slot so far (L per forward once streaming).
  int64_t blocks_copied() const { return blocks_copied_; }
  // Device bytes held: the resident units, the slots and (partitioned) the block shards.
  int64_t device_bytes() const;
  // Device bytes of this rank's block shards (0 unless partitioned).
  int64_t shard_bytes() const;
  int slots() const { return static_cast<int>(slots_.size()); }
  // Bytes of one slot: the largest block (partitioned: padded to whole shards).
  int64_t slot_bytes() const { return block_bytes_; }
  // Host bytes this holds beyond `host`: the pinned blocks (cpu) or the pinned staging (nvme).
  int64_t host_bytes() const;
  // The per-run directory of the swap file (nvme), for tests; empty for cpu.
  std::string swap_dir() const;

 private:
  struct Slot {
    device::DeviceBuffer device;            // block_bytes
    device::DeviceBuffer staging;           // nvme: pinned host, block_bytes
    int layer = -1;                         // the block it holds (or is being copied into it)
    bool in_use = false;                    // acquired, not released
    std::unique_ptr<device::Event> loaded;  // copy stream: the block's copy into the slot
    std::unique_ptr<device::Event> freed;   // compute stream: the kernels reading it enqueued
    // Partitioned with offload: copy stream, this rank's shard copied into the slot (the gather's
    // ready point).
    std::unique_ptr<device::Event> staged;
  };
  StreamedParams(const model::ModelLayout& layout, model::ParamAccess& host,
                 device::ExecutionContext& ctx, const Options& options);
  Status store_blocks(const FillUnitFn& fill_block);
  // Partitioned: this rank's shard of every block into device memory, pinned host memory (cpu)
  // or the swap file (nvme).
  Status store_shards(const FillUnitFn& fill_block);
  // nvme: `numel[l]` elements per block (whole or a shard), each filled by `fill` into the first
  // slot's staging buffer and written once into a fresh swap file.
  Status write_swap(const std::vector<int64_t>& numel,
                    const std::function<Status(int layer, void* dst)>& fill);
  // Makes layers l .. l+slots-1 (cyclically) present or on their way; returns l's slot.
  Slot& ensure_window(int layer);
  // Queues the copy (or gather) of `layer` into `slot`, its end recorded on the copy stream.
  void load(int layer, Slot& slot);
  // The copy from NVMe through the slot's staging buffer.
  void read_nvme(int layer, Slot& slot);
  // Partitioned: the all-gather of `layer` from the ranks' shards into the slot.
  void gather(int layer, Slot& slot);
  void note_error(const Status& s);
  // Notes the errors of the finished gathers and drops them (REQUIRES: error_mu_ held); with
  // `wait`, waits for the others first.
  void check_gathers(bool wait) const;

  const model::ModelLayout layout_;  // a copy: the caller's may be a temporary
  model::ParamAccess& host_;
  device::ExecutionContext& ctx_;
  Options options_;
  int num_blocks_ = 0;
  std::vector<int> layer_of_unit_;  // -1 for units that are not blocks
  std::vector<int64_t> block_numel_;
  int64_t block_bytes_ = 0;  // the largest block
  std::unique_ptr<device::Stream> copy_;
  std::vector<Slot> slots_;
  std::vector<device::DeviceBuffer> resident_;  // per unit (empty for blocks)
  std::vector<device::DeviceBuffer> pinned_;    // cpu: per block
  std::unique_ptr<offload::NvmeSwapper> swapper_;
  std::vector<uint64_t> file_offset_;         // nvme: per block, in the swap file
  std::vector<device::DeviceBuffer> shards_;  // partitioned: per block, shard_numel_ elements
  std::vector<int64_t> shard_numel_;          // partitioned: per block, the gather's block
  std::vector<int64_t> shard_begin_;          // partitioned: per block, this rank's in the slot
  int64_t blocks_copied_ = 0;
  // status_ is set from the copy stream's host functions; gathers_ from status().
  mutable std::mutex error_mu_;
  mutable Status status_;
  struct PendingGather {
    CommHandle handle;
    int layer;  // its errors name the block
  };
  mutable std::vector<PendingGather> gathers_;  // issued, result not yet seen
};

// The observer of a batch over a weight stream: a sequence finishes only while the stream has had
// no error, so no output computed from a failed read is reported (those before it are).
class StreamCheckedObserver final : public BatchObserver {
 public:
  // `stream` may be null (resident weights: nothing to check). Neither is owned.
  StreamCheckedObserver(const StreamedParams* stream, BatchObserver& inner)
      : stream_(stream), inner_(inner) {}
  bool on_token(int64_t i, int32_t token) override { return inner_.on_token(i, token); }
  Status on_finish(int64_t i, FinishReason reason) override {
    if (stream_ != nullptr) ZERO_RETURN_IF_ERROR(stream_->status());
    return inner_.on_finish(i, reason);
  }

 private:
  const StreamedParams* stream_;
  BatchObserver& inner_;
};

}  // namespace zero::runtime
