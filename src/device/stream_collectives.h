// StreamCollectives: ZeRO's collectives on the device path, ordered by events instead of host waits
// (issues 10 and 11; llm.c's zero.cuh). A collective waits for an event the caller recorded on the
// stream that produced its inputs, runs on the communication side, and hands back an event recorded
// after it: the streams that read its outputs, or reuse its buffers, wait for that event. The host
// never waits, except where it frees a buffer or reads a host scalar (the caller's why-comment).
//
//   CUDA backend: the NcclCommunicator's stream waits for `ready` (cudaStreamWaitEvent), runs the
//                 NCCL calls (one ncclGroupStart/End group), records `done` (cudaEventRecord).
//   CPU backend:  the context's comm stream (a CpuStream worker) waits for `ready`, runs the calls
//                 on any communicator of host memory (ThreadCommunicator, MpiCommunicator, ...)
//                 and records `done`; work queued on ctx.comm() after issue() runs after them.
//   host engine:  (ExecutionContext::create_host, compute inline) the calls start at once through
//                 the communicator's asynchronous API, in the caller's program order; the comm
//                 stream waits for them, then records `done`.
#pragma once

#include <memory>
#include <span>

#include "comm/communicator.h"
#include "core/status.h"
#include "device/backend.h"

namespace zero::device {

// One issued collective (or group of them).
struct OrderedCollective {
  // Completes with the collectives' first error: host waits (before freeing the buffers) and
  // error reports. Never needed for ordering.
  CommHandle handle;
  // Recorded after the collectives: a stream that waits for it runs its later work after them.
  std::shared_ptr<Event> done;
};

class StreamCollectives {
 public:
  virtual ~StreamCollectives() = default;
  StreamCollectives(const StreamCollectives&) = delete;
  StreamCollectives& operator=(const StreamCollectives&) = delete;

  // The communicator the collectives run on (rank, world size, counters).
  Communicator& comm() const { return comm_; }

  // Queues `calls` (CollectiveCall: all_reduce and broadcast on `out`, in place) after the work
  // `ready` marks (its most recent record, captured now), as one group: ncclGroupStart/End on
  // NCCL (the owner broadcasts of a unit), in order elsewhere. Returns at once. Work queued on
  // ctx.comm() after this call also runs after the collectives.
  // REQUIRES: buffers in ctx's device memory, untouched by other streams until `done` completed;
  // every rank issues the same calls in the same order; issue from one host thread.
  virtual OrderedCollective issue(const Event& ready, std::span<const CollectiveCall> calls) = 0;

 protected:
  explicit StreamCollectives(Communicator& comm) : comm_(comm) {}

 private:
  Communicator& comm_;
};

// The collectives of `comm` (not owned; outlives the result) ordered on ctx's streams (not owned;
// outlives the result). CUDA: `comm` must be an NcclCommunicator on ctx's GPU. CPU: any
// communicator on host memory, which ctx.comm()'s worker thread then calls: no other thread may
// issue collectives on `comm` while any may be queued (give the device path its own communicator,
// as the engine does: runtime/device_model.h). The host engine's context (compute inline): the
// collectives are issued on the calling thread, so `comm` may be shared with the caller's own
// collectives; REQUIRES then that `ready` has completed (it was recorded on the inline stream).
StatusOr<std::unique_ptr<StreamCollectives>> make_stream_collectives(Communicator& comm,
                                                                     ExecutionContext& ctx);

// A device's collectives over a host communicator (`comm`: host memory; not owned, outlives the
// result; used only from ctx.comm()'s host functions, so give it to no one else: a duplicate of
// the job's communicator), staged through pinned host memory on ctx.comm(): D2H, the host
// collective in a host function, H2D, then `done` (device/staged_stream_collectives.cc). The
// transport of `--dist_backend mpi` and of ranks that share a GPU.
StatusOr<std::unique_ptr<StreamCollectives>> make_staged_stream_collectives(Communicator& comm,
                                                                            ExecutionContext& ctx);

// The CUDA backend's (device/cuda_stream_collectives.cc; builds with NCCL).
StatusOr<std::unique_ptr<StreamCollectives>> make_nccl_stream_collectives(Communicator& comm,
                                                                          ExecutionContext& ctx);

// Starts one call on `comm` through its asynchronous API.
CommHandle issue_collective(Communicator& comm, const CollectiveCall& call);
// Runs one call on `comm` and waits for it (the CPU backend's worker; tests).
Status run_collective(Communicator& comm, const CollectiveCall& call);
// Runs `calls` in order, each waited for; the first error (every call runs, whatever failed: each
// rank must issue them all).
Status run_collectives(Communicator& comm, std::span<const CollectiveCall> calls);

}  // namespace zero::device
