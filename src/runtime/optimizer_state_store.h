// OptimizerStateStore: where this rank's fp32 master weights and optimizer moments live, unit by
// unit, and the streaming that brings them to the update and back (issue 10 item 5). Placements:
// resident in RAM (no offload, or the units past offload_optimizer.ratio), offloaded to host RAM
// (CPU Adam; optionally page-locked), or NVMe swap files read through rotating staging sets with
// pipelined reads and write-backs. The engine keeps the optimizer math (a visitor per unit) and
// never sees where the state is — as ParamStore does for stage-3 parameters.
//
// A fourth placement, on a device: created with a device::ExecutionContext (`--device cuda`, no
// optimizer offload), master weights and moments are buffers of that backend (Backend::allocate);
// the visitors then get device pointers and queue their work on ctx.compute(); initial values,
// checkpoint reads and restores cross with Backend::transfer (the host waits only there).
//
// Each unit's state covers this rank's partition: `partition_numel[u]` floats (the whole padded
// unit at stage 0, the own shard at stages 1-3).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/pinned_memory.h"
#include "core/status.h"
#include "core/tensor.h"
#include "device/backend.h"
#include "runtime/offload_options.h"
#include "sharding/zero_options.h"

namespace zero::offload {
class NvmeSwapper;
}  // namespace zero::offload

namespace zero::runtime {

class OptimizerStateStore {
 public:
  // Fills unit u's master weights: floats [begin, begin + numel) of its partition (host memory).
  using FillFn = std::function<Status(int u, float* master)>;
  // Receives unit u's (new) master weights (the parameter coordinator's set_values); device
  // memory when the state is on a device.
  using InstallFn = std::function<Status(int u, const float* master)>;
  // Updates unit u's state in place (device pointers when the state is on a device).
  using UpdateFn = std::function<void(int u, float* master, float* exp_avg, float* exp_avg_sq)>;
  // Replaces unit u's state (checkpoint restore; host memory).
  using LoadFn = std::function<Status(int u, float* master, float* exp_avg, float* exp_avg_sq)>;

  // Allocates (or creates swap files for) every unit's state, fills the master weights with
  // `fill`, zeroes the moments and installs each unit's master weights. `offload.optimizer` must
  // already be sanitized (kNvme only at stage 3). Adds its bytes to `memory`. Warnings (pinning
  // refused) are printed on rank 0. `device` (not owned; outlives the store): the state on that
  // device (REQUIRES: offload.optimizer none).
  static StatusOr<std::unique_ptr<OptimizerStateStore>> create(
      const OffloadOptions& offload, std::vector<int64_t> partition_numel, int rank,
      sharding::MemoryAccounting& memory, const FillFn& fill, const InstallFn& install,
      device::ExecutionContext* device = nullptr);
  // Waits for in-flight swap I/O and removes the swap files.
  ~OptimizerStateStore();
  OptimizerStateStore(const OptimizerStateStore&) = delete;
  OptimizerStateStore& operator=(const OptimizerStateStore&) = delete;

  int num_units() const { return static_cast<int>(units_.size()); }
  // Units [0, offloaded_units()) use the offloaded optimizer (offload_optimizer.ratio).
  int offloaded_units() const { return offloaded_units_; }
  // Whether some state lives in NVMe swap files.
  bool on_nvme() const { return swapper_ != nullptr; }
  // Whether the state is in device memory (the visitors get device pointers).
  bool on_device() const { return device_ != nullptr; }
  // Unit u's state when it is in RAM; null for a unit on NVMe or a device (use read_partition).
  const float* master(int u) const { return units_[static_cast<size_t>(u)].master.f32(); }
  const float* exp_avg(int u) const { return units_[static_cast<size_t>(u)].exp_avg.f32(); }
  const float* exp_avg_sq(int u) const { return units_[static_cast<size_t>(u)].exp_avg_sq.f32(); }

  // Unit u's state in RAM, for an update outside update_all (ZeRO-Offload's overlapped CPU Adam,
  // one unit at a time on the pipeline's worker). REQUIRES: !on_nvme(), !on_device(); not
  // concurrent with update_all, load_all or read_partition.
  struct RamState {
    float* master;
    float* exp_avg;
    float* exp_avg_sq;
  };
  RamState ram_state(int u);

  // One optimizer step: `update` runs on every unit's state where the update can reach it (NVMe
  // units streamed through the staging sets, first; then the units in RAM, in order), then
  // `install` gets the new master weights and NVMe state is written back. On an error no I/O is
  // left in flight.
  Status update_all(const UpdateFn& update, const InstallFn& install);
  // Replaces every unit's state with `load`'s, then installs it (collective callers: every rank).
  Status load_all(const LoadFn& load, const InstallFn& install);
  // Copies unit u's partition (any pointer may be null to skip it; host memory) from RAM, the swap
  // files or the device. Not concurrent with update_all.
  Status read_partition(int u, float* master, float* exp_avg, float* exp_avg_sq) const;

 private:
  struct UnitState {
    Tensor master;             // fp32 master weights (empty on NVMe)
    Tensor exp_avg;            // first moment
    Tensor exp_avg_sq;         // second moment
    uint64_t swap_offset = 0;  // byte offset of the partition in each swap file (NVMe)
    bool on_nvme = false;
    // On a device: master, exp_avg, exp_avg_sq (the Tensors above stay empty).
    device::DeviceBuffer on_device[3];
  };
  // Staging for one unit's state read from / written to the swap files (4096-aligned).
  struct Staging {
    std::shared_ptr<float> master, exp_avg, exp_avg_sq;
    std::vector<uint64_t> reads, writes;  // outstanding swapper tickets
  };

  OptimizerStateStore(const OffloadOptions& offload, std::vector<int64_t> partition_numel,
                      int rank);
  Status setup_nvme(sharding::MemoryAccounting& memory);
  void pin(sharding::MemoryAccounting& memory);
  // master_only: only the master weights (fast_init's first write).
  Status submit_swap(int u, Staging& st, bool write, bool master_only = false);
  static Status wait_tickets(offload::NvmeSwapper& swapper, std::vector<uint64_t>* tickets);
  Status update_nvme_units(const UpdateFn& update, const InstallFn& install);
  // The device placement's parts of create / load_all / read_partition.
  Status create_on_device(sharding::MemoryAccounting& memory, const FillFn& fill,
                          const InstallFn& install);
  Status load_unit_on_device(int u, const LoadFn& load, const InstallFn& install);
  Status read_partition_on_device(int u, float* master, float* exp_avg, float* exp_avg_sq) const;
  TensorView device_view(int u, int k) const;

  OffloadOptions offload_;
  std::vector<int64_t> partition_numel_;
  int rank_;
  std::vector<UnitState> units_;
  int offloaded_units_ = 0;
  std::unique_ptr<offload::NvmeSwapper> swapper_;  // state on NVMe; null otherwise
  std::vector<Staging> staging_;                   // 1 + pipeline_read + pipeline_write sets
  uint64_t staging_numel_ = 0;                     // floats per staging buffer
  std::vector<PinnedRange> pins_;                  // offload_optimizer.pin_memory
  device::ExecutionContext* device_ = nullptr;     // state on this device; null otherwise
};

}  // namespace zero::runtime
