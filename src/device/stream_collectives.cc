// make_stream_collectives and the CPU backend's StreamCollectives (stream_collectives.h).
#include "device/stream_collectives.h"

#include <utility>
#include <vector>

#include "comm/comm_handle.h"
#include "core/check.h"

namespace zero::device {

CommHandle issue_collective(Communicator& comm, const CollectiveCall& c) {
  switch (c.kind) {
    case CommKind::kAllReduce: return comm.all_reduce_async(c.out, c.numel, c.dtype, c.reduce_op);
    case CommKind::kReduceScatter: return comm.reduce_scatter_async(c.in, c.out, c.numel, c.dtype);
    case CommKind::kAllGather: return comm.all_gather_async(c.in, c.out, c.numel, c.dtype);
    case CommKind::kBroadcast: return comm.broadcast_async(c.out, c.numel, c.dtype, c.root);
    case CommKind::kBarrier: return comm.barrier_async();
  }
  return CommHandle::ready(
      invalid_argument("unknown collective kind {}", static_cast<int>(c.kind)));
}

Status run_collective(Communicator& comm, const CollectiveCall& c) {
  return issue_collective(comm, c).wait();
}

Status run_collectives(Communicator& comm, std::span<const CollectiveCall> calls) {
  Status first;
  for (const CollectiveCall& c : calls) {
    Status s = run_collective(comm, c);
    if (!s.ok() && first.ok()) first = std::move(s);
  }
  return first;
}

namespace {

// The CPU backend: the collectives complete on ctx.comm()'s worker, in stream order; work queued
// there later runs after them.
//   worker streams: the worker waits for `ready`, then runs the calls.
//   the host engine's context (ExecutionContext::create_host: compute inline on the caller's
//   thread): whatever `ready` marks has already run, so the calls start now, through the
//   communicator's own asynchronous calls, in the caller's program order: the order in which every
//   rank issues them, shared with the collectives the caller issues on `comm` directly (the loss,
//   the norm), so one communicator serves both. The worker waits for their completion.
class CpuStreamCollectives final : public StreamCollectives {
 public:
  CpuStreamCollectives(Communicator& comm, CpuStream& stream, bool issue_now)
      : StreamCollectives(comm), stream_(stream), issue_now_(issue_now) {}

  OrderedCollective issue(const Event& ready, std::span<const CollectiveCall> calls) override {
    auto completion = std::make_shared<PromiseCompletion>();
    // Both run even after a failed op on the stream: every rank must issue every collective, or
    // its peers wait for it until their timeout. The error travels in the handle, not the stream.
    if (issue_now_) {
      ZERO_CHECK(ready.query(),
                 "a collective's inputs are still being written on an inline stream");
      std::vector<CommHandle> handles;
      handles.reserve(calls.size());
      for (const CollectiveCall& c : calls) handles.push_back(issue_collective(comm(), c));
      stream_.enqueue_always([completion, handles = std::move(handles)] {
        Status first;
        for (const CommHandle& h : handles) {
          Status s = h.wait();  // each with the communicator's timeout
          if (!s.ok() && first.ok()) first = std::move(s);
        }
        completion->fulfil(std::move(first));
      });
    } else {
      stream_.wait(ready);
      stream_.enqueue_always([&comm = comm(), completion,
                              group = std::vector<CollectiveCall>(calls.begin(), calls.end())] {
        completion->fulfil(run_collectives(comm, group));
      });
    }
    auto done = std::make_shared<CpuEvent>();
    stream_.record(*done);
    return OrderedCollective{CommHandle(std::move(completion)), std::move(done)};
  }

 private:
  CpuStream& stream_;
  const bool issue_now_;  // compute inline: issue on the caller's thread (see above)
};

}  // namespace

StatusOr<std::unique_ptr<StreamCollectives>> make_stream_collectives(Communicator& comm,
                                                                     ExecutionContext& ctx) {
  switch (ctx.device()) {
    case Device::kCpu:
      return std::unique_ptr<StreamCollectives>(std::make_unique<CpuStreamCollectives>(
          comm, static_cast<CpuStream&>(ctx.comm()),
          static_cast<CpuStream&>(ctx.compute()).is_inline()));
    case Device::kCuda:
      // A host communicator (`--dist_backend mpi`, ranks sharing a GPU): staged through pinned
      // host memory; NCCL's own otherwise.
      if (comm.backend_name() != "nccl") return make_staged_stream_collectives(comm, ctx);
#if defined(ZERO_WITH_NCCL)
      return make_nccl_stream_collectives(comm, ctx);
#else
      break;
#endif
  }
  return unimplemented("--device {}: this build has no collectives on that device's streams",
                       device_name(ctx.device()));
}

}  // namespace zero::device
