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
// Each unit's state covers this rank's partition: `partition_numel[u]` elements (the whole padded
// unit at stage 0, the own shard at stages 1-3), in fp32, or with DeepSpeed's
// bf16.bf16_master_weights_and_grads (StateDtypes) the master weights in bf16 and, with
// bf16_optimizer_states, the moments too: 6 bytes per element instead of 12 in every placement.
// The visitors and install get the state in its dtypes (StateRefs, the master weights' view);
// what crosses the fill / load / read_partition seams is fp32 (bf16 widened exactly, fp32 rounded
// to nearest even), so checkpoints see fp32 values.
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

// The dtypes of the optimizer state: fp32, or (DeepSpeed's bf16.bf16_master_weights_and_grads) a
// bf16 master with fp32 moments, or (with bf16.bf16_optimizer_states) bf16 moments too.
struct StateDtypes {
  DType master = DType::kF32;
  DType moments = DType::kF32;
  bool fp32() const { return master == DType::kF32 && moments == DType::kF32; }
  // Bytes of state per element (12, 10 or 6).
  int64_t bytes_per_element() const {
    return static_cast<int64_t>(dtype_bytes(master) + 2 * dtype_bytes(moments));
  }
};

class OptimizerStateStore {
 public:
  // One unit's state where the update reaches it: views of partition_numel[u] elements in the
  // store's dtypes, host memory or the device's.
  struct StateRefs {
    TensorView master, exp_avg, exp_avg_sq;
  };
  // Fills unit u's master weights: floats [begin, begin + numel) of its partition (host memory).
  using FillFn = std::function<Status(int u, float* master)>;
  // Receives unit u's (new) master weights as stored (fp32 or bf16; device memory when the state
  // is on a device) for the parameter coordinator.
  using InstallFn = std::function<Status(int u, const TensorView& master)>;
  // Updates unit u's state in place.
  using UpdateFn = std::function<void(int u, const StateRefs& state)>;
  // Replaces unit u's state with fp32 values (checkpoint restore; host memory).
  using LoadFn = std::function<Status(int u, float* master, float* exp_avg, float* exp_avg_sq)>;

  // Allocates (or creates swap files for) every unit's state, fills the master weights with
  // `fill`, zeroes the moments and installs each unit's master weights. `offload.optimizer` must
  // already be sanitized (kNvme only at stage 3). Adds its bytes to `memory`. Warnings (pinning
  // refused) are printed on rank 0. `device` (not owned; outlives the store): the state on that
  // device (REQUIRES: offload.optimizer none). `dtypes`: fp32 or a bf16 master (REQUIRES: bf16
  // moments only with a bf16 master).
  static StatusOr<std::unique_ptr<OptimizerStateStore>> create(
      const OffloadOptions& offload, std::vector<int64_t> partition_numel, int rank,
      sharding::MemoryAccounting& memory, const FillFn& fill, const InstallFn& install,
      device::ExecutionContext* device = nullptr, StateDtypes dtypes = {});
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
  const StateDtypes& dtypes() const { return dtypes_; }
  // Unit u's fp32 state when it is in RAM; null for a unit on NVMe or a device, and for a bf16
  // state (use read_partition, which widens).
  const float* master(int u) const { return ram_f32(units_[static_cast<size_t>(u)].master); }
  const float* exp_avg(int u) const { return ram_f32(units_[static_cast<size_t>(u)].exp_avg); }
  const float* exp_avg_sq(int u) const {
    return ram_f32(units_[static_cast<size_t>(u)].exp_avg_sq);
  }

  // Unit u's state in RAM, for an update outside update_all (ZeRO-Offload's overlapped CPU Adam,
  // one unit at a time on the pipeline's worker). REQUIRES: !on_nvme(), !on_device(); not
  // concurrent with update_all, load_all or read_partition. ram_state: fp32 state only.
  StateRefs ram_refs(int u);
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
  // Copies unit u's partition as fp32 (any pointer may be null to skip it; host memory) from RAM,
  // the swap files or the device. Not concurrent with update_all.
  Status read_partition(int u, float* master, float* exp_avg, float* exp_avg_sq) const;

 private:
  struct UnitState {
    Tensor master;                        // master weights (empty on NVMe)
    Tensor exp_avg;                       // first moment
    Tensor exp_avg_sq;                    // second moment
    uint64_t swap_offset[3] = {0, 0, 0};  // the partition's byte offset in each swap file (NVMe)
    bool on_nvme = false;
    // On a device: master, exp_avg, exp_avg_sq (the Tensors above stay empty).
    device::DeviceBuffer on_device[3];
  };
  // Staging for one unit's state read from / written to the swap files (4096-aligned), in the
  // state's dtypes.
  struct Staging {
    std::shared_ptr<std::byte> master, exp_avg, exp_avg_sq;
    std::vector<uint64_t> reads, writes;  // outstanding swapper tickets
  };

  OptimizerStateStore(const OffloadOptions& offload, std::vector<int64_t> partition_numel, int rank,
                      StateDtypes dtypes);
  static const float* ram_f32(const Tensor& t) {
    return t.dtype() == DType::kF32 ? static_cast<const float*>(t.data()) : nullptr;
  }
  // Array k (0 master, 1 exp_avg, 2 exp_avg_sq): its dtype and element size.
  DType dtype_of(int k) const { return k == 0 ? dtypes_.master : dtypes_.moments; }
  size_t elem_bytes(int k) const { return dtype_bytes(dtype_of(k)); }
  // Unit u's state in a staging set / in RAM as views.
  StateRefs staging_refs(int u, const Staging& st) const;
  StateRefs unit_refs(int u) const;
  // Fills `master` (the store's master dtype, host memory) with fill's fp32 values (`f32`: room
  // for one partition, used for a bf16 master).
  Status fill_master(int u, const FillFn& fill, void* master, std::vector<float>& f32);
  // load's fp32 values into host arrays of the store's dtypes.
  Status load_host(int u, const LoadFn& load, void* master, void* exp_avg, void* exp_avg_sq);
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
  StateDtypes dtypes_;
};

}  // namespace zero::runtime
