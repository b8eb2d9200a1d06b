// NcclCommunicator implementation (compiled only with NCCL).
#include "comm/nccl_communicator.h"

#if defined(ZERO_WITH_NCCL)

#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>

#include <mpi.h>

#include "comm/comm_handle.h"
#include "comm/nccl_bootstrap.h"
#include "comm/nccl_check.h"

namespace zero {
namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
  }
  return ncclFloat32;
}

// The completion of one NCCL call: a CUDA event (owned) recorded after it on the comm stream.
class EventCompletion final : public CommCompletion {
 public:
  EventCompletion(cudaEvent_t event, ncclComm_t comm, int device, int64_t timeout_ms,
                  std::shared_ptr<std::atomic<bool>> failed, std::string what)
      : event_(event),
        comm_(comm),
        device_(device),
        timeout_ms_(timeout_ms),
        failed_(std::move(failed)),
        what_(std::move(what)) {}
  ~EventCompletion() override { cudaEventDestroy(event_); }

  Status wait() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (result_) return *result_;
    cudaSetDevice(device_);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
    // Why poll instead of cudaEventSynchronize: a dead peer must become an error, not a hang.
    for (;;) {
      const cudaError_t q = cudaEventQuery(event_);
      if (q == cudaSuccess) {
        result_ = ok_status();
        break;
      }
      if (q != cudaErrorNotReady) {
        result_ = internal_error("{}: {}", what_, cudaGetErrorString(q));
        break;
      }
      ncclResult_t async_error = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async_error);
      if (async_error != ncclSuccess && async_error != ncclInProgress) {
        // The error is the communicator's, not this call's: a peer may have failed a later
        // collective after this one finished but before its event was seen to complete (the
        // event trails the kernel). A call that completes within a short grace succeeded; the
        // error is then the next call's.
        if (completes_within(std::chrono::milliseconds(kErrorGraceMs))) {
          result_ = ok_status();
        } else {
          result_ = internal_error("{}: NCCL error {}", what_, ncclGetErrorString(async_error));
        }
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        // NCCL does not say which peer is missing: the other ranks' errors name their own calls.
        result_ = Status(StatusCode::kDeadlineExceeded,
                         fmt::format("{} did not complete within {} ms: a peer rank died, hung or "
                                     "never issued it, or the network between the ranks failed "
                                     "(NCCL_DEBUG=INFO shows NCCL's side)",
                                     what_, timeout_ms_));
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (!result_->ok()) failed_->store(true);
    return *result_;
  }

  bool done() override {
    std::lock_guard<std::mutex> lock(mu_);
    return result_.has_value() || cudaEventQuery(event_) != cudaErrorNotReady;
  }

 private:
  static constexpr int kErrorGraceMs = 100;

  bool completes_within(std::chrono::milliseconds grace) {
    const auto until = std::chrono::steady_clock::now() + grace;
    for (;;) {
      const cudaError_t q = cudaEventQuery(event_);
      if (q != cudaErrorNotReady) return q == cudaSuccess;
      if (std::chrono::steady_clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

  std::mutex mu_;
  cudaEvent_t event_;
  ncclComm_t comm_;
  int device_;
  int64_t timeout_ms_;
  std::shared_ptr<std::atomic<bool>> failed_;
  std::string what_;
  std::optional<Status> result_;
};

}  // namespace

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(MpiCommunicator& bootstrap,
                                                                     int64_t timeout_ms) {
  std::unique_ptr<NcclCommunicator> comm(new NcclCommunicator());
  comm->timeout_ms_.store(timeout_ms > 0 ? timeout_ms : bootstrap.timeout_ms());
  ZERO_RETURN_IF_ERROR(comm->init(bootstrap));
  return comm;
}

StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::create(Communicator& bootstrap,
                                                                     int64_t timeout_ms) {
  if (timeout_ms <= 0) return invalid_argument("NCCL communicator timeout {} ms", timeout_ms);
  std::unique_ptr<NcclCommunicator> comm(new NcclCommunicator());
  comm->timeout_ms_.store(timeout_ms);
  ZERO_RETURN_IF_ERROR(comm->init(bootstrap));
  return comm;
}

namespace {

// One ncclCommInitRank call run on its own thread, shared with the thread that waits for it.
struct InitRendezvous {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;       // the call returned (result, comm set)
  bool abandoned = false;  // the waiter gave up: the thread disposes of a late communicator
  ncclResult_t result = ncclSuccess;
  ncclComm_t comm = nullptr;
};

}  // namespace

StatusOr<ncclComm_t> NcclCommunicator::init_rank_with_deadline(const ncclUniqueId& id) {
  // ncclCommInitRank blocks until every rank joined, with no timeout of its own (its non-blocking
  // form turns every later call non-blocking too): it runs on a helper thread and this one waits
  // up to the communicator's timeout. A rank that gives up leaves the thread behind, detached; a
  // peer arriving late may still complete the rendezvous, and the thread then destroys the
  // communicator nobody waits for (the job is ending: the caller fails and aborts it).
  auto r = std::make_shared<InitRendezvous>();
  std::thread([r, id, device = device_, world = world_size_, rank = rank_] {
    cudaSetDevice(device);  // NCCL binds the communicator to the calling thread's device
    ncclComm_t comm = nullptr;
    const ncclResult_t result = ncclCommInitRank(&comm, world, id, rank);
    std::lock_guard<std::mutex> lock(r->mu);
    if (r->abandoned) {
      if (result == ncclSuccess) ncclCommAbort(comm);
      return;
    }
    r->done = true;
    r->result = result;
    r->comm = comm;
    r->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(r->mu);
  const int64_t timeout_ms = timeout_ms_.load();
  if (!r->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return r->done; })) {
    r->abandoned = true;
    return Status(
        StatusCode::kDeadlineExceeded,
        fmt::format("rank {} (GPU {}): NCCL communicator setup (ncclCommInitRank) did not finish "
                    "within {} ms; all {} ranks had exchanged the NCCL id over MPI just before, so "
                    "either a rank died or hung since, or NCCL cannot connect the ranks (run with "
                    "NCCL_DEBUG=INFO; across hosts check NCCL_SOCKET_IFNAME and the firewall)",
                    rank_, device_, timeout_ms, world_size_));
  }
  if (r->result != ncclSuccess) {
    return internal_error("rank {} (GPU {}): ncclCommInitRank: {}", rank_, device_,
                          ncclGetErrorString(r->result));
  }
  return r->comm;
}

Status NcclCommunicator::init(Communicator& bootstrap) {
  rank_ = bootstrap.rank();
  world_size_ = bootstrap.world_size();
  local_rank_ = bootstrap.local_rank();
  local_world_size_ = bootstrap.local_world_size();
  int device_count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&device_count));
  if (device_count == 0) return failed_precondition("rank {}: no CUDA device", rank_);
  device_ = local_rank_ % device_count;
  CUDA_CHECK(cudaSetDevice(device_));
  ZERO_ASSIGN_OR_RETURN(ncclUniqueId id, exchange_nccl_id(bootstrap));
  ZERO_ASSIGN_OR_RETURN(comm_, init_rank_with_deadline(id));
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaMalloc(&barrier_scratch_, sizeof(float)));
  // On the communicator's own stream: a legacy-stream memset would not order against it.
  CUDA_CHECK(cudaMemsetAsync(barrier_scratch_, 0, sizeof(float), stream_));
  return ok_status();
}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(device_);
  if (comm_ != nullptr) {
    if (failed_->load()) {
      ncclCommAbort(comm_);  // peers may be gone: do not wait for them
    } else {
      // Why sync: in-flight collectives still use the communicator and caller buffers.
      if (stream_ != nullptr) cudaStreamSynchronize(stream_);
      ncclCommDestroy(comm_);
    }
  }
  if (barrier_scratch_ != nullptr) cudaFree(barrier_scratch_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

std::string NcclCommunicator::describe(std::span<const CollectiveCall> calls, uint64_t seq) const {
  // "rank 1 of 4 (GPU 1): all_gather #12 of 4096 bytes (bf16)": what a user needs to find the call
  // (its kind and order on this rank, its size) and the communicator (its size, this rank's GPU).
  const CommKind kind = calls.empty() ? CommKind::kBarrier : calls.front().kind;
  std::string what = fmt::format("rank {} of {} (GPU {}): {} #{}", rank_, world_size_, device_,
                                 comm_kind_name(kind), seq);
  if (calls.empty()) return what;
  int64_t bytes = 0;
  for (const CollectiveCall& c : calls) {
    bytes += comm_payload_bytes(c.kind, c.numel, c.dtype, world_size_);
  }
  if (calls.size() > 1) what += fmt::format(" (a group of {} calls)", calls.size());
  what += fmt::format(" of {} bytes ({})", bytes, dtype_name(calls.front().dtype));
  return what;
}

CommHandle NcclCommunicator::finish(std::span<const CollectiveCall> calls, ncclResult_t result,
                                    const char* call) {
  const uint64_t seq = next_seq_++;
  std::string what = describe(calls, seq);
  if (result != ncclSuccess) {
    failed_->store(true);
    return CommHandle::ready(
        internal_error("{}: {} failed: {}", what, call, ncclGetErrorString(result)));
  }
  // Why set the device: the calling thread may not be the one that ran init() (a comm or
  // offload thread), and an event created on another device cannot be recorded on stream_.
  cudaError_t err = cudaSetDevice(device_);
  cudaEvent_t event = nullptr;
  if (err == cudaSuccess) err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaEventRecord(event, stream_);
  if (err != cudaSuccess) {
    if (event != nullptr) cudaEventDestroy(event);
    return CommHandle::ready(
        internal_error("{}: recording its event failed: {}", what, cudaGetErrorString(err)));
  }
  return CommHandle(std::make_shared<EventCompletion>(event, comm_, device_, timeout_ms_.load(),
                                                      failed_, std::move(what)));
}

ncclResult_t NcclCommunicator::activate() const {
  // Why on every call: device selection is per thread, and collectives are issued from the
  // engine's threads, not the one that ran init().
  return cudaSetDevice(device_) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

ncclResult_t NcclCommunicator::enqueue(const CollectiveCall& c, const char** name) {
  const size_t numel = c.numel;
  record(c.kind, comm_payload_bytes(c.kind, numel, c.dtype, world_size_));
  switch (c.kind) {
    case CommKind::kAllReduce:
      *name = "ncclAllReduce";
      return ncclAllReduce(c.out, c.out, numel, nccl_type(c.dtype),
                           c.reduce_op == ReduceOp::kSum ? ncclSum : ncclMax, comm_, stream_);
    case CommKind::kReduceScatter:
      *name = "ncclReduceScatter";
      return ncclReduceScatter(c.in, c.out, numel, nccl_type(c.dtype), ncclSum, comm_, stream_);
    case CommKind::kAllGather:
      *name = "ncclAllGather";
      return ncclAllGather(c.in, c.out, numel, nccl_type(c.dtype), comm_, stream_);
    case CommKind::kBroadcast:
      *name = "ncclBroadcast";
      if (c.root < 0 || c.root >= world_size_) return ncclInvalidArgument;
      return ncclBroadcast(c.out, c.out, numel, nccl_type(c.dtype), c.root, comm_, stream_);
    case CommKind::kBarrier:
      // NCCL has no barrier: a one-element all-reduce completes only once every rank issued it.
      *name = "ncclAllReduce (barrier)";
      return ncclAllReduce(barrier_scratch_, barrier_scratch_, 1, ncclFloat32, ncclSum, comm_,
                           stream_);
  }
  *name = "?";
  return ncclInvalidArgument;
}

CommHandle NcclCommunicator::issue_after(cudaEvent_t ready, std::span<const CollectiveCall> calls,
                                         cudaEvent_t done) {
  const CommKind kind = calls.empty() ? CommKind::kBarrier : calls.front().kind;
  ncclResult_t result = activate();
  const char* name = "cudaSetDevice";
  if (result == ncclSuccess && cudaStreamWaitEvent(stream_, ready, 0) != cudaSuccess) {
    result = ncclUnhandledCudaError;
    name = "cudaStreamWaitEvent";
  }
  if (result == ncclSuccess && calls.size() > 1) {
    name = "ncclGroupStart";
    result = ncclGroupStart();
  }
  for (size_t i = 0; i < calls.size() && result == ncclSuccess; ++i) {
    result = enqueue(calls[i], &name);
  }
  if (calls.size() > 1) {
    // Closed even after a failed call: an open group would swallow the next collectives.
    const ncclResult_t end = ncclGroupEnd();
    if (result == ncclSuccess && end != ncclSuccess) {
      result = end;
      name = "ncclGroupEnd";
    }
  }
  CommHandle handle = finish(calls, result, name);
  if (result == ncclSuccess) {
    if (const cudaError_t err = cudaEventRecord(done, stream_); err != cudaSuccess) {
      failed_->store(true);
      return CommHandle::ready(internal_error("rank {}: recording the event after {} failed: {}",
                                              rank_, comm_kind_name(kind),
                                              cudaGetErrorString(err)));
    }
  }
  return handle;
}

CommHandle NcclCommunicator::issue_one(const CollectiveCall& c) {
  const char* name = "cudaSetDevice";
  ncclResult_t r = activate();
  if (r == ncclSuccess) r = enqueue(c, &name);
  return finish({&c, 1}, r, name);
}

CommHandle NcclCommunicator::all_reduce_async(void* buf, size_t numel, DType dtype, ReduceOp op) {
  return issue_one({CommKind::kAllReduce, op, dtype, buf, buf, numel, 0});
}

CommHandle NcclCommunicator::reduce_scatter_async(const void* in, void* out, size_t block_numel,
                                                  DType dtype) {
  return issue_one({CommKind::kReduceScatter, ReduceOp::kSum, dtype, in, out, block_numel, 0});
}

CommHandle NcclCommunicator::all_gather_async(const void* in, void* out, size_t block_numel,
                                              DType dtype) {
  return issue_one({CommKind::kAllGather, ReduceOp::kSum, dtype, in, out, block_numel, 0});
}

CommHandle NcclCommunicator::broadcast_async(void* buf, size_t numel, DType dtype, int root) {
  if (root < 0 || root >= world_size_) {
    return CommHandle::ready(
        invalid_argument("broadcast: root {} outside world of {} ranks", root, world_size_));
  }
  return issue_one({CommKind::kBroadcast, ReduceOp::kSum, dtype, buf, buf, numel, root});
}

CommHandle NcclCommunicator::barrier_async() {
  const char* name = "cudaSetDevice";
  ncclResult_t r = activate();
  if (r == ncclSuccess) r = enqueue(CollectiveCall{}, &name);
  return finish({}, r, name);
}

void NcclCommunicator::abort_job(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  ncclCommAbort(comm_);  // kernels waiting on dead peers are torn down, not waited for
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace zero

#endif  // ZERO_WITH_NCCL
