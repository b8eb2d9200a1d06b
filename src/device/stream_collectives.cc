// make_stream_collectives and the CPU backend's StreamCollectives (stream_collectives.h).
#include "device/stream_collectives.h"

#include <utility>
#include <vector>

#include "comm/comm_handle.h"
#include "core/check.h"

namespace zero::device {

Status run_collective(Communicator& comm, const CollectiveCall& c) {
  switch (c.kind) {
    case CommKind::kAllReduce: return comm.all_reduce(c.out, c.numel, c.dtype, c.reduce_op);
    case CommKind::kReduceScatter: return comm.reduce_scatter(c.in, c.out, c.numel, c.dtype);
    case CommKind::kAllGather: return comm.all_gather(c.in, c.out, c.numel, c.dtype);
    case CommKind::kBroadcast: return comm.broadcast(c.out, c.numel, c.dtype, c.root);
    case CommKind::kBarrier: return comm.barrier();
  }
  return invalid_argument("unknown collective kind {}", static_cast<int>(c.kind));
}

namespace {

// The CPU backend: the collectives run on ctx.comm()'s worker, in stream order.
class CpuStreamCollectives final : public StreamCollectives {
 public:
  CpuStreamCollectives(Communicator& comm, CpuStream& stream)
      : StreamCollectives(comm), stream_(stream) {}

  OrderedCollective issue(const Event& ready, std::span<const CollectiveCall> calls) override {
    stream_.wait(ready);
    auto completion = std::make_shared<PromiseCompletion>();
    std::vector<CollectiveCall> group(calls.begin(), calls.end());
    // Runs even after a failed op on the stream: every rank must issue every collective, or its
    // peers wait for it until their timeout. The error travels in the handle, not the stream.
    stream_.enqueue_always([&comm = comm(), completion, group = std::move(group)] {
      Status first;
      for (const CollectiveCall& c : group) {
        Status s = run_collective(comm, c);
        if (!s.ok() && first.ok()) first = std::move(s);
      }
      completion->fulfil(std::move(first));
    });
    auto done = std::make_shared<CpuEvent>();
    stream_.record(*done);
    return OrderedCollective{CommHandle(std::move(completion)), std::move(done)};
  }

 private:
  CpuStream& stream_;
};

CommHandle issue_async(Communicator& comm, const CollectiveCall& c) {
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

// The host engine's context (ExecutionContext::create_host: compute inline on the caller's
// thread): whatever `ready` marks has already run, so the collectives start now, through the
// communicator's own asynchronous calls, in the caller's program order: the order in which every
// rank issues them, shared with the collectives the caller issues on `comm` directly (the loss,
// the norm), so one communicator serves both. The comm stream waits for their completion; work
// queued on it later runs after them.
class InlineStreamCollectives final : public StreamCollectives {
 public:
  InlineStreamCollectives(Communicator& comm, CpuStream& stream)
      : StreamCollectives(comm), stream_(stream) {}

  OrderedCollective issue(const Event& ready, std::span<const CollectiveCall> calls) override {
    ZERO_CHECK(ready.query(), "a collective's inputs are still being written on an inline stream");
    std::vector<CommHandle> handles;
    handles.reserve(calls.size());
    for (const CollectiveCall& c : calls) handles.push_back(issue_async(comm(), c));
    auto completion = std::make_shared<PromiseCompletion>();
    stream_.enqueue_always([completion, handles = std::move(handles)] {
      Status first;
      for (const CommHandle& h : handles) {
        Status s = h.wait();  // each with the communicator's timeout
        if (!s.ok() && first.ok()) first = std::move(s);
      }
      completion->fulfil(std::move(first));
    });
    auto done = std::make_shared<CpuEvent>();
    stream_.record(*done);
    return OrderedCollective{CommHandle(std::move(completion)), std::move(done)};
  }

 private:
  CpuStream& stream_;
};

}  // namespace

StatusOr<std::unique_ptr<StreamCollectives>> make_stream_collectives(Communicator& comm,
                                                                     ExecutionContext& ctx) {
  switch (ctx.device()) {
    case Device::kCpu:
      if (static_cast<CpuStream&>(ctx.compute()).is_inline()) {
        return std::unique_ptr<StreamCollectives>(
            std::make_unique<InlineStreamCollectives>(comm, static_cast<CpuStream&>(ctx.comm())));
      }
      return std::unique_ptr<StreamCollectives>(
          std::make_unique<CpuStreamCollectives>(comm, static_cast<CpuStream&>(ctx.comm())));
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
