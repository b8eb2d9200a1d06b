// GradReducer: the model's GradSink under ZeRO. Backward hands over each unit's gradient (rounded
// to the model dtype, as a 16-bit backward would produce it); the reducer turns it into this rank's
// fp32 gradient partition:
//   stage 0   accumulate the full unit locally; all-reduce once per step
//   stage 1   accumulate the full unit locally; reduce-scatter once per step (at the boundary)
//   stage 2/3 reduce-scatter every micro-step as soon as the unit is ready; keep only the own shard
// With overlap_comm the collectives run on the communication thread while backward goes on; on the
// last micro-step, stages 0–1 reduce each unit as soon as it is final.
// Buckets (DeepSpeed's reduce_bucket_size): consecutive units are coalesced into one collective
// while their padded numel stays <= reduce_bucket_numel. A bucket is issued when the next unit
// would not fit, when it is full, at the end of a micro-step's backward (stages 2–3) and at
// finish_step(). A reduce-scatter bucket is packed rank-major ([u1 shard r | u2 shard r | ...] for
// r = 0..N−1), so each rank's output block is its shards of all units; an all-reduce bucket is a
// concatenation. A unit larger than the bucket is reduced alone, in place, and so is a unit of at
// least kAloneNumel, as soon as it is ready: packing copies it once more for the saving of one
// collective call, which pays only for small units (a 50257 x 256 embedding packed into the bucket
// was a 51 MB copy per micro-step). Per element the reduction is the same sum over ranks, so
// buckets change call counts, never bytes or results.
// communication_data_type (ZeroOptions::comm_dtype) 16-bit: the bucket is rounded into a 16-bit
// wire buffer, reduced (the communicator sums in fp32), and the 16-bit result widened back into the
// fp32 buffers before accumulation: result = round(sum over ranks of round(g_r)).
// One algorithm for every memory space (STYLE 16): the micro-step buffers, accumulators,
// partitions and bucket buffers are a backend's memory, and the packing, accumulation and 16-bit
// rounding are Backend ops (zero / copy / accumulate / accumulate_rounded / round_to) queued on
// ctx.compute() behind the model's backward. The context is the device's (`--device cuda`, or the
// CPU backend on worker streams in the staging tests) or, when none is given, the reducer's own
// host context (ExecutionContext::create_host: compute inline on the caller's thread, a comm worker
// thread). At world 1 every bucket is reduce_alone's (the 16-bit wire's rounding included), so no
// collective. With several ranks the collectives are stream-ordered (device/stream_collectives.h,
// issues 10 and 11): a bucket's collective waits for an event recorded on the compute stream after
// its packing; the work on its result (widening a 16-bit wire, copying out, accumulating) is queued
// when it is issued, on ctx.comm() behind it, followed by the bucket's `done` event; completing a
// bucket makes the compute stream wait for `done` (before a pooled buffer is reused, or the norm
// and the update read the partitions): on the host context that wait is the host's (timed:
// MemoryAccounting::comm_wait_s), on a device it is the stream's. A failed collective is reported
// by finish_step() once it has finished (wait_collectives() waits).
// Micro-step buffers are pooled, not one per unit: a unit takes one when backward first writes it
// and hands it back once nothing reads it any more (accumulated at stages 0-1, packed or reduced at
// stages 2-3), so stages 2-3 never hold the whole model's fp32 gradient at once.
// Host gradients (ZeroOptions::grads_on_host, stages 2-3 on a device: ZeRO-Offload's layout): the
// partitions are page-locked host memory (Backend::allocate_host) and nothing of them stays on the
// device. Each bucket's reduced shards, once final on their stream (compute at world 1, comm behind
// a collective), are added to the host partitions on the reducer's copy stream `grad_d2h`, which
// waits for an event there: per unit, a pooled device buffer is zeroed (the unit's first
// micro-step of the step) or loaded from the host partition (H2D), the shard is accumulated into it
// (the same Backend::accumulate, in the same order, as the device accumulator's: bitwise), on the
// last micro-step its sum of squares is taken there (the global norm: per unit, added in unit order
// by the engine, bitwise the device partitions' norm), and it is copied back (D2H). The bucket's
// `done` is recorded on the copy stream, so its pooled buffers go back only after the copies; at
// most kHostBucketsInFlight buckets are in flight (the compute stream waits for the oldest, never
// the host), so device gradient memory is bounded by the buckets, not the model. Accumulating
// through the device costs the copy engines an H2D and a D2H per micro-step after the first
// (DeepSpeed's async_accumulate_grad_in_cpu_via_gpu) instead of a host pass on one callback thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "core/tensor.h"
#include "device/backend.h"
#include "device/stream_collectives.h"
#include "model/param_access.h"
#include "sharding/shard_layout.h"
#include "sharding/zero_options.h"

namespace zero::sharding {

class GradReducer : public model::GradSink {
 public:
  // Units this large (padded numel: 1 MiB of fp32) are reduced alone, never packed into a bucket.
  static constexpr int64_t kAloneNumel = int64_t{1} << 18;
  // Host gradients: buckets in flight at most (their device buffers are the gradient's device
  // memory).
  static constexpr size_t kHostBucketsInFlight = 2;

  // `device` (not owned; outlives the reducer): buffers in its backend's memory (see the file
  // comment); `comm` must then work on that memory, its collectives issued through
  // device::make_stream_collectives (REQUIRES as there: on the CPU backend's worker streams no
  // other thread issues collectives on `comm`). Null: host memory, on the reducer's own host
  // context (`comm` may then be shared with the caller's collectives, issued from this thread).
  // Fails when device memory runs out or `comm` does not fit the device.
  static StatusOr<std::unique_ptr<GradReducer>> create(const ShardLayout& layout,
                                                       Communicator& comm,
                                                       const ZeroOptions& options,
                                                       MemoryAccounting& memory,
                                                       device::ExecutionContext* device = nullptr);
  // Host memory on the reducer's own host context (create() without a device; aborts when host
  // memory runs out).
  GradReducer(const ShardLayout& layout, Communicator& comm, const ZeroOptions& options,
              MemoryAccounting& memory);
  ~GradReducer() override;

  // Zeroes the partition accumulators; `num_micro_steps` backward passes follow.
  void begin_step(int num_micro_steps);
  // Call before each micro-step's backward (0-based index).
  void begin_micro_step(int micro_step);

  float* grad_buffer(int u) override;
  void grad_ready(int u) override;

  // Issues what is left, waits for every collective, and leaves the reduced gradient of this rank's
  // partition of each unit in partition(u). Returns the first collective error. On a device the
  // waits are the compute stream's (no host wait): partition(u) is ready in stream order, and an
  // error of a collective still running is returned by wait_collectives() or the next step.
  Status finish_step();
  // Host wait for the collectives issued so far (each with its communicator's timeout: a dead
  // peer is an error, not a hang of the stream synchronize after it); their first error. The
  // engine calls it where it waits for the step's scalars anyway.
  Status wait_collectives();
  // This rank's reduced fp32 gradient of unit u: the full padded unit at stage 0, the own shard
  // (shard_numel values) at stages 1–3. Valid after finish_step() (on a device: in stream order
  // after ctx.compute()'s work queued so far).
  const float* partition(int u) const;
  // Partition offset in unit-flat coordinates (0 at stage 0, shard_begin otherwise).
  int64_t partition_begin(int u) const;
  int64_t partition_numel(int u) const;
  // Stages 1-3: `hook(u, ready)` is called (on the thread driving the reducer) once
  // per step as soon as the ops producing unit u's final partition(u) of the step are queued on
  // stream `ready` (ctx.comm() behind a collective, ctx.compute() for a world of one), often during
  // backward (ZeRO-Offload copies it to the host from there: its copy waits for an event recorded
  // on `ready` now).
  void set_on_partition_final(std::function<void(int u, device::Stream& ready)> hook) {
    on_partition_final_ = std::move(hook);
  }
  // Whether partition(u) is page-locked host memory (ZeroOptions::grads_on_host at stages 2-3 on
  // a device), written by the reducer's copy stream: final once the compute stream's work queued
  // by finish_step() has run (it waits for every bucket), or, from the on_partition_final hook,
  // after the work queued so far on its `ready` stream (the copy stream).
  bool partitions_on_host() const { return on_host_; }
  // Host gradients: the sum of squares (and non-finite flag) of unit u's final partition over its
  // real elements (this rank's shard_data_numel), taken on the device before the copy to the host;
  // complete after wait_host_copies(). The engine adds them in unit order (the global norm).
  const device::SumSquaresOut& partition_sum_squares(int u) const {
    return norms_[static_cast<size_t>(u)];
  }
  // Host gradients: host wait for the copy stream (its first error: a failed copy to or from the
  // host partitions). OK without them.
  Status wait_host_copies();

 private:
  struct Unit {
    // This micro-step's gradient as backward writes it (padded_numel, fp32; from the pool while
    // held: empty between grad_ready / its reduction and the next grad_buffer).
    device::DeviceBuffer micro;
    // Stages 0–1: full-unit accumulator; 2–3: own-shard accumulator (page-locked host memory with
    // host gradients).
    device::DeviceBuffer accum;
    device::DeviceBuffer reduced;    // stage 1: this rank's reduced shard
    bool in_open = false;            // in the bucket being filled
    bool has_pending = false;        // an in-flight bucket still reads / writes this unit's buffers
    bool reduced_this_step = false;  // stages 0–1 reduced early (overlap on the last micro-step)
    bool host_written = false;       // host gradients: accum holds this step's sum so far
  };
  struct Bucket {
    std::vector<int> units;
    device::DeviceBuffer in;   // packed input (empty: a single unit reduced from / into its buffer)
    device::DeviceBuffer out;  // reduce-scatter output: this rank's shards of all units
    // comm_dtype != fp32: the rounded input and the reduce-scatter output in the wire dtype, and
    // the fp32 buffer the result is widened into (numel result_numel).
    device::DeviceBuffer wire_in, wire_out;
    float* result = nullptr;
    int64_t result_numel = 0;
    // Recorded on ctx.comm() after the collective and the work on its result.
    std::unique_ptr<device::Event> done;
    CommHandle pending;
    // The micro buffers the bucket still reads (a single unit reduced from its own buffer at
    // stages 2-3), back to the pool once it completed.
    std::vector<device::DeviceBuffer> micro_held;
    // Host gradients: the device copies of the units' host partitions being accumulated (their
    // shards, in b.units order).
    device::DeviceBuffer to_host;
    bool final_for_step = false;  // issued on the last micro-step (on_partition_final_)
  };
  GradReducer(const ShardLayout& layout, Communicator& comm, const ZeroOptions& options,
              MemoryAccounting& memory, device::ExecutionContext* device);
  Status allocate();
  void add_to_bucket(int u);  // queue a ready unit; issues the bucket when it is full
  void flush_open();          // issue the bucket being filled (if any)
  void issue(Bucket b);
  // A world of one: the reduction of a bucket is its input (rounded to a 16-bit wire: the sum over
  // one rank is its rounded input), so the bucket is finished in place, on the compute stream, and
  // counted as the collective it stands for.
  void reduce_alone(Bucket b);
  // Several ranks: packing and wire rounding on the compute stream (pack()), the stream-ordered
  // collective, then queue_result.
  void issue_collective(Bucket b);
  // The bucket's input: a single unit's own buffer, or the units packed into b.in (concatenated
  // for an all-reduce, rank-major for a reduce-scatter); stage 2-3 micro buffers back to the pool
  // once packed.
  TensorView pack(Bucket& b, bool rank_major);
  // The work on a bucket's reduced result (widening, copies, accumulation), queued on ctx.comm()
  // behind its collective (`collective_done`; `in`: its fp32 input, pack()'s), then the bucket's
  // `done` event.
  void queue_result(Bucket& b, const TensorView& in, const device::Event& collective_done);
  // Host gradients: adds this micro-step's reduced shards `parts` (device memory, one per unit of
  // b.units, final in stream order on `ready` after the work queued there so far) to the host
  // partitions on the copy stream (see the file comment) and records b.done there.
  void queue_to_host(Bucket& b, const std::vector<TensorView>& parts, device::Stream& ready);
  // Queues b as in flight (its units pending), then completes the oldest buckets beyond the bound
  // (host gradients) or all of them (no overlap_comm).
  void push_in_flight(Bucket b);
  // Keeps the first error of the finished collectives in status_ (never blocks).
  void note_finished_collectives();
  // Pooled buffers (freed with the reducer): the same sizes recur every micro-step. A buffer given
  // back is reused in stream order (its next user queues on the compute stream, after the ops that
  // read it, or after a wait for the bucket that did).
  device::DeviceBuffer take(int64_t numel, DType dtype);
  void give(device::DeviceBuffer b);
  // A view (the context's memory) of `numel` elements of `dtype` at `data`.
  TensorView view_of(const void* data, DType dtype, int64_t numel) const;
  // A buffer of at least the largest padded unit in `dtype` (a 16-bit wire's rounding at world
  // 1), reused by every op in stream order.
  TensorView scratch(DType dtype, int64_t numel);
  void complete_front();    // wait + post-process the oldest in-flight bucket
  void drain_until(int u);  // complete buckets in issue order until u's is done
  // What a collective of bucket `b`'s units reads at stages 0-1 (the accumulator) or 2-3 (this
  // micro-step's gradient).
  TensorView source(int u) const;

  const ShardLayout& layout_;
  Communicator& comm_;
  ZeroOptions options_;
  MemoryAccounting& memory_;
  std::unique_ptr<device::ExecutionContext> own_host_;  // no context given: the host's
  device::ExecutionContext* ctx_ = nullptr;             // the given one, or own_host_
  // Several ranks: the collectives, the event they wait for on the compute stream, and the
  // handles of issued ones whose result is not known yet.
  std::unique_ptr<device::StreamCollectives> collectives_;
  std::unique_ptr<device::Event> ready_;
  struct Unchecked {
    CommHandle handle;
    std::string what;  // "gradients of units 3-5": its errors say so
  };
  std::vector<Unchecked> unchecked_;
  device::DeviceBuffer scratch_[3];         // scratch(), by dtype
  std::vector<device::DeviceBuffer> pool_;  // take / give
  std::vector<Unit> units_;
  std::vector<int> open_;  // units of the bucket being filled, in ready order
  int64_t open_numel_ = 0;
  std::deque<Bucket> in_flight_;  // issued buckets, in issue order
  int num_micro_steps_ = 1;
  int micro_step_ = 0;
  int64_t pooled_bytes_ = 0;
  // Host gradients (partitions_on_host()).
  bool on_host_ = false;
  std::unique_ptr<device::Stream> to_host_stream_;  // "grad_d2h"
  std::unique_ptr<device::Event> to_host_ready_;
  std::vector<device::SumSquaresOut> norms_;  // by unit, this step's
  std::function<void(int u, device::Stream& ready)> on_partition_final_;
  Status status_;
};

}  // namespace zero::sharding
