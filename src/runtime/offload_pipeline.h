// OffloadPipeline: ZeRO-Offload with the model on a device (issue 11 item 5). The parameter
// coordinator's working values and the gradient reducer's buffers live in device memory, as with
// nothing offloaded; master weights and moments stay where offload_optimizer puts them (host RAM or
// NVMe, OptimizerStateStore) and the CPU Adam updates them. This class moves one step's data
// between the two, on two copy streams of its own, through page-locked double buffers:
//
//   compute: backward, reduction, norm ──record grads_final──┐
//   d2h:     wait grads_final; partition(u) → grad slot u%2 ──record downloaded[slot]
//   host:    wait downloaded[slot]; CPU Adam of unit u; the slot takes unit u+2
//   host:    master(u) rounded to the model dtype → upload slot k%2 (after uploaded[slot] of unit
//            k-2: the host rewrites it); after backward the CPU Adam writes it there itself
//   h2d:     wait cast_done[slot]; upload slot → device slot ──record uploaded[slot]
//   compute: wait uploaded[slot]; set_model_dtype_values copies into the coordinator's unit
//            ──record cast_done
//
// A bf16/fp16 model's new weights cross in 16 bits (half an fp32 master's bytes), rounded on the
// host by the CPU cast (round-to-nearest-even, bitwise the device cast set_values would run).
//
// The copies of unit u+1 (down) and u-1 (up) run while the host updates unit u. The host waits
// only on a download it is about to read, on an upload slot it is about to rewrite, and once at
// the end of a step (finish(): a failed copy is the step's error). One host thread drives a
// pipeline.
//
// Overlap (begin_overlap .. end_overlap): when a unit's update needs only its own gradient (no
// clipping, no loss scale), the host thread hands each unit over as soon as the reducer has queued
// its final partition (partition_final, usually during backward); the pipeline's worker thread
// queues its download on the d2h stream behind an event of the compute stream, and runs the
// caller's host update on it when it arrives, while backward goes on. Only the worker touches the
// d2h stream and the gradient slots then; uploads stay with the host thread (set_values may start
// collectives, whose order must be every rank's).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "device/backend.h"
#include "sharding/param_coordinator.h"
#include "sharding/zero_options.h"

namespace zero::runtime {

// Host wall time the pipeline's parts took, summed since construction (milliseconds).
struct OffloadTimes {
  double download_wait_ms = 0.0;  // host waiting for a gradient partition's copy to the host
  double cpu_adam_ms = 0.0;       // the host updates (CPU Adam), on the host or worker thread
  double overlap_wait_ms = 0.0;   // end_overlap(): the host waiting for the worker after backward
  int64_t overlapped_units = 0;   // units the worker updated (overlap)
  double upload_ms = 0.0;         // copying masters into upload slots, their waits included
  double finish_wait_ms = 0.0;    // finish(): the last uploads landing
  int64_t upload_values = 0;      // values copied host -> device by upload()
  int64_t caller_rounded_values = 0;  // of those, rounded by the caller (next_upload_host)
  int64_t upload_bytes = 0;           // their bytes (in the model dtype: 2 per value for bf16/fp16)
};

// The wall_clock_breakdown companion line, per step over `steps` steps since `before`:
//   offload (ms) | d2h wait: W | cpu adam: A | upload: U | after bwd wait: O | finish: F |
//   overlapped units: N | h2d MB: M
std::string offload_log_line(const OffloadTimes& now, const OffloadTimes& before, int64_t steps);
// offload_param's companion line (the parameter coordinator's shard copies on the device path),
// per step over `steps` steps since `before`, to set beside the pinned-copy bandwidth:
//   param offload | h2d MB: H | d2h MB: D | uploads: N
std::string param_offload_log_line(const sharding::ParamTransfers& now,
                                   const sharding::ParamTransfers& before, int64_t steps);

class OffloadPipeline {
 public:
  // Partitions hold at most `max_partition_numel` floats. Allocates two page-locked fp32 gradient
  // slots and two page-locked upload slots of that size in `model_dtype`, and two device slots in
  // `model_dtype` (counted in `memory`: pinned_bytes as pinned_host_bytes says, device_bytes).
  // `ctx` (not owned) outlives the pipeline.
  static StatusOr<std::unique_ptr<OffloadPipeline>> create(device::ExecutionContext& ctx,
                                                           int64_t max_partition_numel,
                                                           DType model_dtype,
                                                           sharding::MemoryAccounting& memory);
  // The page-locked host bytes create() allocates (the memory plan counts them).
  static int64_t pinned_host_bytes(int64_t max_partition_numel, DType model_dtype);
  // Waits for its copies (the slots are freed after).
  ~OffloadPipeline();
  OffloadPipeline(const OffloadPipeline&) = delete;
  OffloadPipeline& operator=(const OffloadPipeline&) = delete;

  // Unit u's reduced fp32 gradient partition in device memory (partition_numel(u) floats).
  using DeviceGradFn = std::function<TensorView(int u)>;

  // The step's gradients are final in stream order on ctx.compute() (everything queued so far):
  // downloads of the units in `order` start, two in flight (the double buffer).
  void begin_downloads(std::vector<int> order, DeviceGradFn device_grad);
  // The host copy of unit u's gradient partition (waits for its download). REQUIRES: u is the next
  // unit of begin_downloads' order.
  const float* host_grad(int u);
  // The host is done reading unit u's gradient: its slot takes the next unit of the order.
  void release_grad(int u);

  // Rounds `master` (host memory, e.g. a unit's new master weights: fp32, or already in the model
  // dtype, a bf16 master) to the model dtype into an upload slot, copies that to a device slot and
  // calls `install` with the device copy (master.numel() values in the model dtype); `install`
  // queues its reads of it on ctx.compute() (ParamCoordinator::set_model_dtype_values), which
  // waits for the copy. `master` may be rewritten on return.
  Status upload(const TensorView& master,
                const std::function<Status(const void* device_values)>& install);
  // For a caller that rounds the next upload's values itself, in the pass that computes them (the
  // CPU Adam's 16-bit output, bitwise this class's cast): the page-locked host slot the next
  // upload() sends, room for `numel` values in the model dtype, once the copy out of it (two
  // uploads ago) has run. That upload() then sends the slot as it is and does not read `master`.
  // nullptr for an fp32 model (nothing to round: upload() copies the master). REQUIRES: the next
  // call is upload() with the same numel, every value of the slot written before it.
  void* next_upload_host(int64_t numel);

  // End of a step (or of a restore): every copy has run; returns the first copy error. Leaves no
  // download in flight (a step that failed half-way included).
  Status finish();

  // Overlap (see the file comment). `update(u, grad)` runs on the worker thread with unit u's
  // host gradient; it must touch only what no other thread uses until end_overlap (unit u's host
  // state). REQUIRES: no begin_downloads in progress.
  using HostUpdateFn = std::function<void(int u, const float* grad)>;
  void begin_overlap(HostUpdateFn update);
  // Hands unit u over: its final partition is `device_grad`, in stream order on `ready` (the
  // reducer's comm stream behind a collective, or compute) after the work queued there so far.
  // Never blocks. Between begin_overlap and end_overlap.
  void partition_final(int u, TensorView device_grad, device::Stream& ready);
  // As partition_final, for a partition already in host memory (the reducer's host gradients,
  // written on `ready`, its copy stream): no download, the worker waits for `ready`'s point and
  // hands `host_grad` to the update. Never blocks.
  void partition_final_on_host(int u, const float* host_grad, device::Stream& ready);
  // Waits until the worker has updated every unit handed over; returns them, in update order.
  std::vector<int> end_overlap();
  bool overlapping() const { return overlapping_; }

  // The overlapped update's rollback copy: for each unit, master | exp_avg | exp_avg_sq as they
  // were before this step's early update (the CPU Adam writes them in the same pass), restored when
  // the step turns out non-finite and is skipped. keep_rollback allocates it for partitions of
  // `partition_numel` floats (host memory: 12 bytes per element, each copy rounded up to 64-byte
  // lines so all three share their alignment and the CPU Adam streams them) and returns the bytes
  // without the padding (what the memory plan counts).
  int64_t keep_rollback(const std::vector<int64_t>& partition_numel);
  // Unit u's copy k (0: master, 1: exp_avg, 2: exp_avg_sq), partition_numel(u) floats.
  float* rollback_copy(int u, int k);
  // Copies unit u's rollback copy back into its state (parallel: memory-bound; a skipped step
  // only).
  void restore_rollback(int u, float* master, float* exp_avg, float* exp_avg_sq);

  void add_adam_ms(double ms);
  OffloadTimes times() const;

 private:
  OffloadPipeline(device::ExecutionContext& ctx, DType model_dtype);
  void start_download(int slot);
  void worker_loop();

  device::ExecutionContext& ctx_;
  DType model_dtype_;  // of the upload slots
  std::unique_ptr<device::Stream> d2h_, h2d_;
  std::unique_ptr<device::Event> grads_final_;
  // Gradient slots (page-locked host) and the unit each holds (-1: free).
  device::DeviceBuffer grad_host_[2];
  std::unique_ptr<device::Event> downloaded_[2];
  int grad_unit_[2] = {-1, -1};
  // Upload slots (model dtype): page-locked host, the device copy, and their events.
  device::DeviceBuffer upload_host_[2], upload_dev_[2];
  std::unique_ptr<device::Event> uploaded_[2], cast_done_[2];
  int next_upload_slot_ = 0;
  int64_t filled_numel_ = -1;  // next_upload_host's numel until upload() sends it; -1: none
  std::vector<int> order_;
  size_t next_download_ = 0;  // the index in order_ of the next unit to download
  size_t next_read_ = 0;      // the index in order_ of the next unit host_grad may return
  DeviceGradFn device_grad_;

  // Overlap. mu_ guards everything below and times_.
  struct Handed {
    int u;
    TensorView device_grad;
    device::Event* final;              // recorded on the compute stream after the partition's ops
    const float* host_grad = nullptr;  // partition_final_on_host: read in place, no download
  };
  // Records unit u's final event on `ready` and queues `h` for the worker.
  void hand_over(Handed h, device::Stream& ready);
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool overlapping_ = false;              // host thread only
  AlignedBuffer rollback_;                // keep_rollback
  std::vector<int64_t> rollback_offset_;  // unit u's three copies start here (floats)
  std::vector<int64_t> rollback_numel_;   // unit u's partition numel
  HostUpdateFn update_;
  std::deque<Handed> handed_;  // handed over, download not queued yet
  int64_t handed_count_ = 0;   // this overlap: units handed over
  std::vector<int> done_;      // this overlap: units the worker updated, in order
  std::vector<std::unique_ptr<device::Event>> final_events_;  // by unit (host thread grows it)
  bool stop_ = false;
  OffloadTimes times_;
  std::thread worker_;  // started by the first begin_overlap
};

}  // namespace zero::runtime
