// ParamCoordinator: the model's ParamAccess under ZeRO. Working values are kept in the model dtype
// (a bf16/fp16 unit takes half the bytes of an fp32 one; gathers land in it directly). Stages 0–2
// keep every unit's working values resident. Stage 3 keeps only this rank's shard and gathers a
// unit just in time on acquire(), prefetches the next units of the recorded access trace (within
// the prefetch bucket and the live limit), and releases gathered units after use unless persistent
// or reused soon. The trace is fixed by the model's unit order, so every rank issues the same
// collectives in the same order.
//
// One algorithm for every memory space (STYLE 16): the units live in a backend's memory and every
// move of values (the cast of the master into the unit, a shard copied into its block) is a
// Backend op on ctx.compute(), the stream the model reads them on. The context is the device's
// (`--device cuda` with the state on the device, or the CPU backend's worker streams in the
// staging tests) or, when none is given, the coordinator's own host context
// (ExecutionContext::create_host: compute inline on the caller's thread). With several ranks the
// gathers are stream-ordered (device/stream_collectives.h, issues 10 and 11): each waits for an
// event recorded on the compute stream when it is issued (after the cast that wrote the own block
// or shard, and after the kernels still reading a reused buffer), and acquire() (or a new
// set_values) makes the compute stream wait for the gather's `done` event: on the host context a
// host wait (timed: MemoryAccounting::comm_wait_s), on a device the stream's. A unit's owner
// broadcasts (allgather_partitions=false) go out as one group. Where the stage-3 shards live is
// the one difference between placements: a ParamStore on the host context (host memory, or NVMe
// beyond offload_param.max_in_cpu), a device buffer per unit on a device, or, on a device with
// offload_param (ZeRO-Infinity), a ParamStore of the device's page-locked host memory (or NVMe):
// then no unit lives on the device between uses. A gather first copies the own shard host-to-device
// on the coordinator's copy stream into the unit's own block of its gather buffer (after an event
// of the compute stream: kernels still reading a reused buffer), and the all-gather runs in place,
// waiting for an event after that copy (a world of one: the copy is the gather, and acquire waits
// for it). New values go the other way: cast on the compute stream into one of two device slots and
// copied device-to-host on the copy stream into the host shard (an NVMe shard: into a page-locked
// buffer, a host wait, the swap write), or written on the host when the caller holds them there
// (set_host_values: offload_optimizer's CPU Adam). Device memory for parameters is then the gather
// buffers (planned_gathered_numel) and the two slots, whatever the model's size.
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
#include "sharding/param_store.h"
#include "sharding/shard_layout.h"
#include "sharding/zero_options.h"

namespace zero::sharding {

// The most elements of gathered units (stage 3, several ranks) the memory plans count alive at
// once: the unit in use, the prefetch window and the tied head's reuse (runtime/memory_plan.cc's
// host and device plans; the coordinator's out-of-memory line quotes it).
int64_t planned_gathered_numel(const ShardLayout& layout, int64_t prefetch_bucket_numel);

// Stage 3 on a device with offload_param: the device slots new values cross in (two shards of the
// largest unit, in the model dtype), counted by the device plan.
int64_t offloaded_param_slot_numel(const ShardLayout& layout);

// Bytes a coordinator with offloaded shards on a device has copied, summed since construction.
struct ParamTransfers {
  int64_t h2d_bytes = 0;  // shards copied host-to-device for gathers
  int64_t d2h_bytes = 0;  // new shard values copied device-to-host
  int64_t uploads = 0;    // shard copies host-to-device
};

class ParamCoordinator : public model::ParamAccess {
 public:
  // Stage 3 on the host keeps its shards in a ParamStore placed as `offload` says (host memory,
  // or NVMe beyond max_in_cpu); errors are those of creating the swap file. `rank` names the swap
  // file. `device` (not owned; outlives the coordinator): keep the units in its backend's memory
  // (see the file comment); `comm` must then work on that memory, its collectives issued through
  // device::make_stream_collectives (REQUIRES as there: on the CPU backend's worker streams no
  // other thread issues collectives on `comm`). REQUIRES then: no parameter offload. Null: host
  // memory, on the coordinator's own host context (`comm` may be shared with the caller's own
  // collectives, issued from this thread). A device with parameter offload (stage 3 only): the
  // shards in the store, the device's host memory (see the file comment).
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
  // its memory; a ParamStore takes fp32 values). For an fp32 model the same as set_values.
  Status set_model_dtype_values(int u, const void* values);
  // set_values with `values` in host memory (fp32, or the model dtype): written into the host
  // shard as they are or rounded, with no copy to the device and back (ZeRO-Offload's CPU Adam
  // holds the new values on the host). REQUIRES: params_offloaded().
  Status set_host_values(int u, const TensorView& values);
  // Stage 3 on a device with the shards in host memory or NVMe (offload_param).
  bool params_offloaded() const { return upload_; }
  const ParamTransfers& transfers() const { return transfers_; }
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
  // Stage 3 on the host context, or on a device with offload_param: where the shards live (null
  // below stage 3, and on a device without offload_param).
  const ParamStore* store() const { return store_.get(); }

 private:
  ParamCoordinator(const ShardLayout& layout, Communicator& comm, const ZeroOptions& options,
                   MemoryAccounting& memory, device::ExecutionContext* device);
  struct Unit {
    // The unit's values in the model dtype (padded_numel): stages 0–2 always; stage 3 while
    // gathered (from the gather pool).
    device::DeviceBuffer full;
    // Stage 3 on a device: this rank's shard (the padded unit at world 1, lent as its `view`). On
    // the host context the ParamStore holds the shards.
    device::DeviceBuffer shard;
    // Stage 3 in a world of one: the unit's values are the shard itself (shard_numel ==
    // padded_numel, in the model dtype), so "gathering" lends its pointer: no buffer, no copy.
    // Valid until the next set_values (the shard's write) or release.
    const void* view = nullptr;
    // Offloaded shards: recorded on the copy stream after each upload of the host shard (it may
    // be rewritten, or an NVMe shard's loaded copy dropped, once it has completed).
    std::shared_ptr<device::Event> uploaded;
    CommHandle pending;  // an in-flight gather into `full`
    // Recorded after the gather (the compute stream waits for it before reading).
    std::shared_ptr<device::Event> done;
    bool has_pending = false;
    bool gathered = false;  // stage 3: `full` holds current values
    bool persistent = false;
    int refcount = 0;
    int64_t gathers = 0;
  };
  Status allocate(const ParamOffloadOptions& offload);
  // set_values for `values` of `values_dtype` (fp32, or the model dtype): the cast (or the copy)
  // into the unit, then the gathers.
  Status install(int u, const void* values, DType values_dtype);
  // Stage 3: the own shard's values (the store's, loaded; or the device shard).
  StatusOr<const void*> load_shard(int u);
  void gather_async(int u);
  // A world of one with the shard in memory (not on NVMe): gather_async lends the shard (see
  // Unit::view).
  bool gather_is_view(int u) const;
  // Starts the all-gather (or owner broadcasts) of unit u into unit.full (model dtype) from this
  // rank's shard `shard` (P values in the model dtype), or, when `shard` is null, from the own
  // block as it stands. A world of one (an NVMe shard) copies the shard in.
  // `ready`: the event the collectives wait for (null: one recorded on the compute stream now).
  void issue_gather(int u, const void* shard, const device::Event* ready = nullptr);
  // Offloaded shards (upload_): the gather of unit u from its host shard (see the file comment).
  void upload_and_gather(int u);
  // Offloaded shards: new values (device memory, `values_dtype`) copied into the host shard.
  Status download_shard(int u, const void* values, DType values_dtype);
  // Offloaded shards: host wait until the last upload of unit u has read its host shard.
  void wait_uploaded(int u);
  // Offloaded NVMe shards: drops the loaded copies whose uploads have completed (all: waits).
  void drop_uploaded(bool all);
  // install()'s stage-3 part once the shard holds the new values: stale gathered copies dropped,
  // the next forward's first gathers started.
  Status after_shard_install(int u);
  // Unit u's own block (this rank's shard) inside unit.full.
  char* own_block(int u) const;
  model::ParamView working_view(const Unit& unit) const;
  // A view (the context's memory) of `numel` elements of the model dtype at `data`.
  TensorView view_of(const void* data, int64_t numel) const;
  void note_peak_gathered();
  // Keeps gathered buffers plus pooled ones within stage3_max_live_parameters.
  void trim_pool();
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
  std::unique_ptr<device::ExecutionContext> own_host_;  // no context given: the host's
  device::ExecutionContext* ctx_ = nullptr;             // the given one, or own_host_
  // Several ranks: the gathers, the event they wait for on the compute stream, and the handles of
  // issued ones whose result is not known yet.
  std::unique_ptr<device::StreamCollectives> collectives_;
  std::unique_ptr<device::Event> ready_;
  struct Unchecked {
    CommHandle handle;
    int unit;  // whose parameters it fetched (its errors say so)
  };
  std::vector<Unchecked> unchecked_;
  std::vector<Unit> units_;
  std::unique_ptr<ParamStore> store_;  // stage 3 on the host: this rank's shards (host or NVMe)
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
  // kept), and freeing device memory waits for the device. At most one per unit; kept buffers plus
  // gathered units stay within stage3_max_live_parameters (trim_pool()).
  std::vector<device::DeviceBuffer> pool_;
  // Offloaded shards (stage 3 on a device with offload_param): store_ is the device's host memory.
  bool upload_ = false;
  std::unique_ptr<device::Stream> copy_;          // host-to-device and device-to-host shard copies
  std::unique_ptr<device::Event> compute_mark_;   // the compute stream's point a copy waits for
  std::vector<device::DeviceBuffer> down_slots_;  // device: new values cross here (two)
  std::vector<std::unique_ptr<device::Event>> down_done_;  // after each slot's copy to the host
  int next_down_ = 0;
  device::DeviceBuffer down_host_;  // host: an NVMe shard's new values before the swap write
  std::vector<int> nvme_loaded_;    // NVMe units whose loaded copy an upload read (to drop)
  ParamTransfers transfers_;
};

}  // namespace zero::sharding
