// ParamCoordinator: the model's ParamAccess under ZeRO. Working values are kept in the model dtype
// (a bf16/fp16 unit takes half the bytes of an fp32 one; gathers land in it directly). Stages 0–2
// keep every unit's working values resident. Stage 3 keeps only this rank's shard and gathers a
// unit just in time on acquire(), prefetches the next units of the recorded access trace (within
// the prefetch bucket and the live limit), and releases gathered units after use unless persistent
// or reused soon. The trace is fixed by the model's unit order, so every rank issues the same
// collectives in the same order.
//
// Memory space: created with a device::ExecutionContext (`--device cuda` with the state on the
// device), every unit's working values (stage 3: the shards and gathered units) live in that
// backend's memory and set_values casts the device master into them with Backend::copy on
// ctx.compute(), the stream the model reads them on (stream order, no host wait). With several
// ranks the gathers are stream-ordered (device/stream_collectives.h, issues 10 and 11): each waits
// for an event recorded on the compute stream when it is issued (after the cast that wrote the own
// block or shard, and after the kernels still reading a reused buffer), and acquire() (or a new
// set_values) makes the compute stream wait for the gather's `done` event; a unit's owner
// broadcasts (allgather_partitions=false) go out as one group. The host waits only where device
// memory is freed. Without a context, host memory and the host kernels.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "core/tensor.h"
#include "device/backend.h"
#include "device/stream_collectives.h"
#include "model/param_access.h"
#include "sharding/buffer_pool.h"
#include "sharding/param_store.h"
#include "sharding/shard_layout.h"
#include "sharding/zero_options.h"

namespace zero::sharding {

class ParamCoordinator : public model::ParamAccess {
 public:
  // Stage 3 keeps its shards in a ParamStore placed as `offload` says (host memory, or NVMe
  // beyond max_in_cpu); errors are those of creating the swap file. `rank` names the swap file.
  // `device` (not owned; outlives the coordinator): keep the working values in its backend's
  // memory (see the file comment); `comm` must then work on that memory, its collectives issued
  // through device::make_stream_collectives (REQUIRES as there). REQUIRES then: no parameter
  // offload.
  static StatusOr<std::unique_ptr<ParamCoordinator>> create(
      const ShardLayout& layout, Communicator& comm, const ZeroOptions& options,
      const ParamOffloadOptions& offload, MemoryAccounting& memory,
      device::ExecutionContext* device = nullptr);
  ~ParamCoordinator() override;

  // Installs the master values of this rank's shard of unit u (rounded to the model dtype), and
  // (`values`: memory of the coordinator's space, the device's when it was created with one)
  // makes them visible: stages 0–2 gather the full unit (all-gather or owner broadcasts); stage 3
  // marks gathered copies stale and, once the access trace is known, starts gathering the units the
  // next forward begins with (see leads_trace). Stage 0 passes the full unit (every rank holds it).
  Status set_values(int u, const float* values);
  // set_values with `values` already rounded to the model dtype (the caller cast them, e.g. on
  // the host before uploading half the bytes: runtime/offload_pipeline.h): installed as they are
  // (a plain copy), everything else as set_values. REQUIRES: created with a device (`values` in
  // its memory). For an fp32 model the same as set_values.
  Status set_model_dtype_values(int u, const void* values);
  // Completes the gathers set_values started (stages 1–2 with overlap issue them asynchronously);
  // stage 3's are prefetches, left in flight for acquire() to wait on.
  Status finish_updates();

  // A new micro-step starts: the access trace position goes back to the start. `another_follows`:
  // a micro-step of the same optimizer step comes after this one, so the values cannot change
  // before it; stage 3 then measures a released unit's reuse distance on into that micro-step's
  // trace (the forward re-reads every unit), and keeps it gathered when it is within
  // stage3_max_reuse_distance and the live budget, instead of gathering it again.
  void begin_micro_step(bool another_follows = false);

  // The unit in the model dtype; at stage 3 in a world of one, the host shard itself (see
  // Unit::view).
  model::ParamView acquire(int u) override;
  void release(int u) override;
  // First error of a collective issued inside acquire() (which cannot return a Status). On a
  // device, of those finished so far (never blocks).
  const Status& status();

  // Number of gathers issued for unit u so far (tests).
  int64_t gathers(int u) const { return units_[static_cast<size_t>(u)].gathers; }
  // Stage 3 in host memory: where the shards live (null below stage 3 and on a device).
  const ParamStore* store() const { return store_.get(); }

 private:
  ParamCoordinator(const ShardLayout& layout, Communicator& comm, const ZeroOptions& options,
                   MemoryAccounting& memory, device::ExecutionContext* device);
  struct Unit {
    Tensor full;  // model dtype; stages 0–2: always; stage 3: while gathered (padded_numel)
    // On a device: the unit's values at stages 0-2, this rank's shard at stage 3 (the padded unit
    // at world 1, lent as its `view` as the host shard is); gathered_dev: stage 3's gathered unit.
    device::DeviceBuffer on_device, gathered_dev;
    // Stage 3 in a world of one: the unit's values are the host shard itself (shard_numel ==
    // padded_numel, in the model dtype), so "gathering" lends its pointer: no buffer, no copy.
    // Valid until the next set_values (the store's write) or release.
    const void* view = nullptr;
    CommHandle pending;  // an in-flight gather into `full`
    // On a device: recorded after the gather (the compute stream waits for it before reading).
    std::shared_ptr<device::Event> done;
    bool has_pending = false;
    bool gathered = false;  // stage 3: `full` holds current values
    bool persistent = false;
    int refcount = 0;
    int64_t gathers = 0;
  };
  // set_values on a device: the cast (or, `values_dtype` the model dtype, the copy) into the
  // device unit, then the gathers.
  Status set_device_values(int u, const void* values, DType values_dtype);
  void gather_async(int u);
  // gather_async on a device, several ranks: the all-gather of the device shard into a gathered
  // buffer (kept ones reused).
  void gather_on_device(int u);
  // A world of one with the shard in host memory: gather_async lends the shard (see Unit::view).
  bool gather_is_view(int u) const;
  // Starts the all-gather (or owner broadcasts) of unit u into unit.full (model dtype) from this
  // rank's shard `shard` (P values in the model dtype: the store's), or, when `shard` is null,
  // from the own block as it stands.
  void issue_gather(int u, const void* shard);
  // issue_gather's collectives on a device, stream-ordered; `in`: the all-gather's input.
  void issue_gather_on_device(int u, const void* in);
  // The buffer holding unit u's full values (unit.full, or on_device on a device).
  char* unit_base(int u) const;
  // Unit u's own block (this rank's shard) inside unit.full.
  char* own_block(int u) const;
  model::ParamView working_view(const Unit& unit) const;
  void note_peak_gathered();
  void trim_pool();
  void trim_device_pool();
  // Stage 3, set_values: whether unit u is gathered at the start of the next micro-step's trace
  // (within the prefetch bucket), so its gather can start now, during the rest of the update.
  bool leads_trace(int u) const;
  void wait_pending(int u);
  void free_gathered(int u);
  void prefetch_after(size_t trace_pos);
  bool reused_soon(int u, size_t trace_pos) const;
  void note_status(const Status& s);

  const ShardLayout& layout_;
  Communicator& comm_;
  ZeroOptions options_;
  MemoryAccounting& memory_;
  device::ExecutionContext* device_;  // null: host memory
  // On a device, stage 3: gathered buffers kept for reuse.
  std::vector<device::DeviceBuffer> device_pool_;
  // On a device, several ranks: the gathers, the event they wait for on the compute stream, and
  // the handles of issued ones whose result is not known yet.
  std::unique_ptr<device::StreamCollectives> collectives_;
  std::unique_ptr<device::Event> ready_;
  std::vector<CommHandle> unchecked_;
  std::vector<Unit> units_;
  std::unique_ptr<ParamStore> store_;  // stage 3: this rank's shards (host or NVMe)
  // Stage 3: the order of acquire() calls in one micro-step, recorded on the first one.
  std::vector<int> trace_;
  bool trace_recorded_ = false;
  bool trace_valid_ = true;
  size_t trace_pos_ = 0;
  bool another_micro_step_follows_ = false;
  int64_t live_gathered_numel_ = 0;
  int live_gathered_units_ = 0;
  Status status_;
  // Stage-3 gather buffers (full units in the model dtype), kept for the next gather of the same
  // size: blocks have equal sizes, and every unit is gathered again each step. A fresh buffer is
  // page-faulted and zeroed (the largest, the embedding, every step at world 2 when only two were
  // kept). Kept buffers plus gathered units stay within stage3_max_live_parameters (trim_pool()).
  BufferPool pool_{0};
};

}  // namespace zero::sharding
