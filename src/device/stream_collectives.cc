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

}  // namespace

StatusOr<std::unique_ptr<StreamCollectives>> make_stream_collectives(Communicator& comm,
                                                                     ExecutionContext& ctx) {
  switch (ctx.device()) {
    case Device::kCpu:
      return std::unique_ptr<StreamCollectives>(
          std::make_unique<CpuStreamCollectives>(comm, static_cast<CpuStream&>(ctx.comm())));
    case Device::kCuda:
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
