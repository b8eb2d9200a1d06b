// ParamStore: where this rank's stage-3 parameter shards live (zero_optimization.offload_param).
// Shards are stored in the model dtype everywhere (they hold working parameters, which are values
// of that dtype), so a bf16/fp16 model's shards take half the host memory and half the NVMe bytes
// of an fp32 one. Without offload, and with `cpu`, every shard is a host buffer (page-locked when
// `pin_memory`). With `nvme`, shards are kept in host memory up to `max_in_cpu` elements (in unit
// order, persistent units first) and the rest live in one swap file per rank (class "param"),
// byte for byte as in memory. Reads and writes go
// through `buffer_count` staging buffers of at most `buffer_size` elements each: a shard larger
// than a buffer is moved in pieces (never rejected, unlike DeepSpeed), and at most buffer_count
// pieces are in flight. Reads run ahead (prefetch) along the gather order; writes run behind (the
// next read of the same unit, or flush(), waits for them).
//
// With a model on a device (ZeRO-Infinity's device path: ParamCoordinator on a device) the host
// shards and the loaded copies of NVMe shards are the backend's host memory (allocate_host:
// page-locked for its transfers, cudaHostAlloc), so the coordinator's host-to-device copies read
// them where they are; loaded copies are then pooled (a page-locked allocation is slow).
//
// Thread safety: none; used by the ParamCoordinator on the compute thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/pinned_memory.h"
#include "core/status.h"
#include "core/tensor.h"
#include "device/backend.h"
#include "offload/aio_config.h"
#include "sharding/shard_layout.h"
#include "sharding/zero_options.h"

namespace zero::offload {
class NvmeSwapper;
class NvmeFaultHook;
}  // namespace zero::offload

namespace zero::sharding {

enum class ParamOffload { kNone, kCpu, kNvme };

// zero_optimization.offload_param (+ the `aio` block), as the sharding layer acts on it.
struct ParamOffloadOptions {
  ParamOffload device = ParamOffload::kNone;
  std::string nvme_path;                     // required for kNvme; created if missing
  int64_t max_in_cpu_numel = 1'000'000'000;  // kNvme: shard elements kept in host memory
  int buffer_count = 5;                      // staging buffers (pieces in flight)
  int64_t buffer_numel = 100'000'000;        // elements per staging buffer (one piece)
  bool pin_memory = false;                   // page-lock host shards and staging (best effort)
  offload::AioConfig aio;
  offload::NvmeFaultHook* fault_hook = nullptr;  // tests: injected I/O faults (not owned)
};

class ParamStore {
 public:
  // `persistent[u]` units always stay in host memory. Creates the swap file (kNvme).
  // `transfer_backend` (not owned; outlives the store; null: plain host memory): allocate the host
  // shards and loaded copies with its allocate_host (counted in memory.pinned_bytes).
  static StatusOr<std::unique_ptr<ParamStore>> create(const ShardLayout& layout,
                                                      const ParamOffloadOptions& options,
                                                      const std::vector<bool>& persistent,
                                                      DType model_dtype, int rank,
                                                      MemoryAccounting& memory,
                                                      device::Backend* transfer_backend = nullptr);
  // Waits for every request in flight; the swapper removes its file.
  ~ParamStore();
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  bool on_nvme(int u) const { return units_[static_cast<size_t>(u)].on_nvme; }
  int num_on_nvme() const;
  // The dtype of every shard, in memory and on disk: the model dtype.
  DType dtype() const { return dtype_; }

  // Installs new values of unit u's shard: shard_numel fp32 values (the updated master), rounded
  // to the model dtype as they are stored (round-to-nearest-even, as round_to_dtype). Host shards
  // are written in place; NVMe shards are written behind: the next load(u) orders after the write,
  // and a write error surfaces from a later load(), prefetch() or flush().
  Status write(int u, const float* values);
  // write() of shard_numel values of `values_dtype`: fp32 (rounded as write() rounds them) or the
  // model dtype (stored as they are: a bf16 master of a bf16 model, or values already rounded).
  Status write(int u, const void* values, DType values_dtype);
  // The host shard of a unit kept in host memory (not on NVMe), for a copy from the device to land
  // in directly; the caller orders it like write(). REQUIRES: !on_nvme(u).
  void* host_shard(int u);
  // Starts reading an NVMe shard into host memory if staging buffers are free (no-op otherwise,
  // and for host shards). Never blocks on I/O except to order after this unit's own writes.
  Status prefetch(int u);
  // The shard's values: shard_numel elements of dtype(), valid until drop(u) (NVMe) or the next
  // write(u). Blocks until an NVMe shard is fully read.
  StatusOr<const void*> load(int u);
  // Frees the host copy of an NVMe shard loaded by load() / prefetch() (no-op for host shards).
  void drop(int u);
  // Waits for every write in flight (the end of an optimizer step).
  Status flush();

  // Requests served so far (tests): pieces read and written.
  int64_t pieces_read() const { return pieces_read_; }
  int64_t pieces_written() const { return pieces_written_; }
  int64_t staging_numel() const { return staging_numel_; }
  // Why pinning did not happen (empty if it did or was not asked for).
  const std::string& pin_warning() const { return pin_warning_; }

 private:
  // A shard's host memory: a Tensor, or the transfer backend's host buffer.
  struct HostCopy {
    Tensor tensor;
    device::DeviceBuffer buffer;
    void* data() const { return buffer.data() != nullptr ? buffer.data() : tensor.data(); }
    bool empty() const { return data() == nullptr; }
    size_t nbytes() const {
      return buffer.data() != nullptr ? buffer.view().nbytes() : tensor.nbytes();
    }
  };
  struct Unit {
    bool on_nvme = false;
    HostCopy host;  // model dtype; always for host units, while loaded for NVMe ones (shard_numel)
    PinnedRange pin;            // of `host` for host units when pin_memory
    uint64_t offset_bytes = 0;  // NVMe: byte offset of the shard in the swap file
    int pieces_pending = 0;     // NVMe: reads in flight into `host`
    int next_piece = 0;         // NVMe: next piece to submit a read for (loading)
    int writes_pending = 0;     // NVMe: writes in flight from staging
  };
  struct InFlight {
    int unit;
    int piece;
    int staging;
    uint64_t ticket;
    bool is_write;
  };
  ParamStore(const ShardLayout& layout, const ParamOffloadOptions& options, DType model_dtype,
             MemoryAccounting& memory, device::Backend* transfer_backend);
  // Host memory for `numel` elements of the model dtype: a Tensor, or the transfer backend's (a
  // loaded copy from the pool when `loaded`). Counted in memory_.param_bytes (and pinned_bytes).
  StatusOr<HostCopy> allocate_host_copy(int64_t numel, bool loaded);
  // Frees a loaded copy (kept in the pool when it is the transfer backend's).
  void free_loaded_copy(HostCopy copy);
  int num_pieces(int u) const;
  int64_t piece_numel(int u, int piece) const;
  // Completes the oldest request in flight (copying a read piece into its unit's host buffer)
  // and frees its staging buffer.
  Status complete_oldest();
  // A free staging buffer, completing the oldest requests until one is free.
  StatusOr<int> take_staging();
  Status submit_read_piece(int u, int piece, int staging);
  Status wait_writes(int u);
  // NVMe unit: orders after its writes and allocates its host copy (no-op when loaded/loading).
  Status begin_load(int u);

  const ShardLayout& layout_;
  ParamOffloadOptions options_;
  DType dtype_;  // the model dtype: of host shards, staging and the swap file
  size_t elem_bytes_;
  MemoryAccounting& memory_;
  device::Backend* transfer_backend_ = nullptr;
  std::vector<device::DeviceBuffer> loaded_pool_;  // freed loaded copies (transfer backend's)
  std::vector<Unit> units_;
  std::unique_ptr<offload::NvmeSwapper> swapper_;
  int64_t staging_numel_ = 0;  // elements per staging buffer (a multiple of 4 KiB)
  std::vector<std::shared_ptr<std::byte>> staging_;
  std::vector<PinnedRange> staging_pins_;
  std::vector<int> free_staging_;
  std::deque<InFlight> in_flight_;
  int64_t pieces_read_ = 0, pieces_written_ = 0;
  std::string pin_warning_;
};

}  // namespace zero::sharding
