// The staged StreamCollectives (stream_collectives.h): a device's collectives over a host
// communicator (`--dist_backend mpi`, and ranks that share a GPU, where NCCL refuses to run).
// Everything is queued on the context's comm stream, so the host never waits:
//   wait(ready) -> D2H of each call's input into pinned staging -> a host function that runs the
//   calls on the host communicator (blocking that stream only, with the communicator's timeout)
//   -> H2D of each call's output -> record(done).
// All of it on one stream, in issue order, so every rank runs the calls in the same order, and a
// staging arena reused by the next issue is only written after this one's last copy.
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "comm/comm_handle.h"
#include "core/check.h"
#include "device/stream_collectives.h"

namespace zero::device {
namespace {

// Bytes of a call's input and output on the wire (host staging), by kind.
struct StagedSizes {
  size_t in_bytes = 0, out_bytes = 0;
};

StagedSizes staged_sizes(const CollectiveCall& c, int world) {
  const size_t n = c.numel * dtype_bytes(c.dtype);
  switch (c.kind) {
    case CommKind::kAllReduce:
    case CommKind::kBroadcast: return {n, 0};  // in place: out is the input's staging
    case CommKind::kReduceScatter: return {n * static_cast<size_t>(world), n};
    case CommKind::kAllGather: return {n, n * static_cast<size_t>(world)};
    case CommKind::kBarrier: return {0, 0};
  }
  return {};
}

class StagedStreamCollectives final : public StreamCollectives {
 public:
  StagedStreamCollectives(Communicator& host_comm, ExecutionContext& ctx)
      : StreamCollectives(host_comm), ctx_(ctx) {}

  ~StagedStreamCollectives() override {
    // Why a host wait: queued copies and host functions still use the staging freed below.
    (void)ctx_.comm().synchronize();
  }

  OrderedCollective issue(const Event& ready, std::span<const CollectiveCall> calls) override {
    Backend& backend = ctx_.backend();
    Stream& stream = ctx_.comm();
    const int world = comm().world_size();
    stream.wait(ready);
    size_t total = 0;
    for (const CollectiveCall& c : calls) {
      const StagedSizes z = staged_sizes(c, world);
      total += round_up(z.in_bytes) + round_up(z.out_bytes);
    }
    std::byte* arena = staging(total);
    // The host calls, on the staging: inputs copied down first, outputs copied up after.
    std::vector<CollectiveCall> host_calls;
    size_t off = 0;
    for (const CollectiveCall& c : calls) {
      const StagedSizes z = staged_sizes(c, world);
      CollectiveCall h = c;
      std::byte* in = arena + off;
      off += round_up(z.in_bytes);
      std::byte* out = z.out_bytes > 0 ? arena + off : in;
      off += round_up(z.out_bytes);
      if (z.in_bytes > 0) {
        const void* src =
            c.kind == CommKind::kAllReduce || c.kind == CommKind::kBroadcast ? c.out : c.in;
        backend.transfer(stream, bytes_view(in, z.in_bytes, Device::kCpu),
                         bytes_view(src, z.in_bytes, ctx_.device()));
      }
      h.in = in;
      h.out = out;
      host_calls.push_back(h);
    }
    auto completion = std::make_shared<PromiseCompletion>();
    backend.host_function(stream, [&comm = comm(), completion, host_calls] {
      completion->fulfil(run_collectives(comm, host_calls));
    });
    for (size_t i = 0; i < calls.size(); ++i) {
      const CollectiveCall& c = calls[i];
      const StagedSizes z = staged_sizes(c, world);
      const size_t out_bytes = z.out_bytes > 0 ? z.out_bytes : z.in_bytes;
      if (out_bytes == 0) continue;
      backend.transfer(stream, bytes_view(c.out, out_bytes, ctx_.device()),
                       bytes_view(host_calls[i].out, out_bytes, Device::kCpu));
    }
    std::shared_ptr<Event> done = backend.create_event();
    stream.record(*done);
    return OrderedCollective{CommHandle(std::move(completion)), std::move(done)};
  }

 private:
  static size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

  // `bytes` bytes as a view of `device` memory (transfers move bytes as they are).
  static TensorView bytes_view(const void* data, size_t bytes, Device device) {
    return TensorView{const_cast<void*>(data), DType::kF16, Shape{static_cast<int64_t>(bytes / 2)},
                      device};
  }

  // The pinned staging arena of at least `bytes`. Reused in stream order (every use is on the comm
  // stream); grown rarely, after a host wait for the uses of the old one.
  std::byte* staging(size_t bytes) {
    if (arena_bytes_ < bytes) {
      // Why a host wait: queued copies and host functions may still use the old arena.
      (void)ctx_.comm().synchronize();
      arena_ = DeviceBuffer();
      const size_t grown = std::max(bytes, arena_bytes_ * 2);
      StatusOr<DeviceBuffer> b =
          ctx_.backend().allocate_host(DType::kF16, static_cast<int64_t>((grown + 1) / 2));
      ZERO_CHECK(b.ok(), "pinned staging for collectives: ", b.status().to_string());
      arena_ = std::move(*b);
      arena_bytes_ = grown;
    }
    return static_cast<std::byte*>(arena_.data());
  }

  ExecutionContext& ctx_;
  DeviceBuffer arena_;
  size_t arena_bytes_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<StreamCollectives>> make_staged_stream_collectives(Communicator& host_comm,
                                                                            ExecutionContext& ctx) {
  return std::unique_ptr<StreamCollectives>(
      std::make_unique<StagedStreamCollectives>(host_comm, ctx));
}

}  // namespace zero::device
