// NcclCommunicator: the GPU backend. One NCCL communicator per process (one device per rank), its
// collectives enqueued on a dedicated CUDA stream (the "comm stream"); a CommHandle waits on a CUDA
// event recorded after the call. Bootstrapped over an MpiCommunicator.
#pragma once

#if defined(ZERO_WITH_NCCL)

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <memory>
#include <span>
#include <string>

#include "comm/communicator.h"
#include "comm/mpi_communicator.h"

namespace zero {

// Same contract as Communicator; buffers are device pointers on this rank's device. Inputs must be
// ready on the comm stream when a collective is issued: the caller makes stream() wait for the
// producing stream (cudaStreamWaitEvent) or synchronizes before issuing.
// Reductions of bf16/f16 use NCCL's native 16-bit types (NCCL widens each pairwise step to fp32 and
// rounds per step, unlike the MPI backend's single rounding).
// Thread safety: as Communicator; every call makes the communicator's device current on the
// calling thread first (device selection is per thread), so any thread may issue.
class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap`'s ranks: selects device local_rank % device_count, exchanges the
  // NCCL id over MPI, initialises NCCL and creates the comm stream. `timeout_ms` as
  // MpiCommunicator (0: the bootstrap's).
  static StatusOr<std::unique_ptr<NcclCommunicator>> create(MpiCommunicator& bootstrap,
                                                            int64_t timeout_ms = 0);
  // The same over any communicator's ranks (ThreadCommunicator: ranks on threads, as the CPU
  // emulator's NCCL stand-in runs them, docs/emu.md), with an explicit timeout_ms > 0.
  static StatusOr<std::unique_ptr<NcclCommunicator>> create(Communicator& bootstrap,
                                                            int64_t timeout_ms);
  // Waits for the comm stream, then destroys the NCCL communicator (aborts it after a timeout or an
  // asynchronous NCCL error) and the stream.
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  int local_rank() const override { return local_rank_; }
  int local_world_size() const override { return local_world_size_; }
  std::string_view backend_name() const override { return "nccl"; }

  CommHandle all_reduce_async(void* buf, size_t numel, DType dtype, ReduceOp op) override;
  CommHandle reduce_scatter_async(const void* in, void* out, size_t block_numel,
                                  DType dtype) override;
  CommHandle all_gather_async(const void* in, void* out, size_t block_numel, DType dtype) override;
  CommHandle broadcast_async(void* buf, size_t numel, DType dtype, int root) override;
  CommHandle barrier_async() override;
  [[noreturn]] void abort_job(int exit_code) override;

  // The stream-ordered form (device/stream_collectives.h, issue 11): stream() waits for `ready`
  // (cudaStreamWaitEvent; no host sync), runs `calls` as one ncclGroupStart/End group (in place
  // for all_reduce and broadcast: CollectiveCall::out), then records `done` (cudaEventRecord) for
  // the consumers' streams to wait on. The handle completes after them as the *_async ones do.
  // REQUIRES: `ready` and `done` events of this communicator's device.
  CommHandle issue_after(cudaEvent_t ready, std::span<const CollectiveCall> calls,
                         cudaEvent_t done);

  // The stream every collective runs on. Owned by the communicator.
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }
  void set_timeout_ms(int64_t timeout_ms) { timeout_ms_.store(timeout_ms); }
  int64_t timeout_ms() const { return timeout_ms_.load(); }

 private:
  NcclCommunicator() = default;
  Status init(Communicator& bootstrap);
  // ncclCommInitRank on device_, bounded by timeout_ms_: a rank that never joins is a
  // kDeadlineExceeded naming this rank, its GPU and the likely causes, not a hang.
  StatusOr<ncclComm_t> init_rank_with_deadline(const ncclUniqueId& id);
  // Counts and enqueues one call on stream_ (the calling thread's device must be device_).
  // `*name`: the NCCL function, for messages.
  ncclResult_t enqueue(const CollectiveCall& c, const char** name);
  // Makes device_ current on the calling thread (the engine's threads are not init()'s).
  ncclResult_t activate() const;
  // Enqueues one call and finishes it.
  CommHandle issue_one(const CollectiveCall& c);
  // Records an event after the last enqueued call (of `calls`, none for a barrier) and wraps it in
  // a handle whose errors name the collective (describe()).
  CommHandle finish(std::span<const CollectiveCall> calls, ncclResult_t result, const char* call);
  // "rank R of W (GPU d): all_gather #seq of N bytes (bf16)": the collective in every error.
  std::string describe(std::span<const CollectiveCall> calls, uint64_t seq) const;

  int rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_world_size_ = 1;
  int device_ = 0;
  std::atomic<int64_t> timeout_ms_{kDefaultCommTimeoutMs};
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<std::atomic<bool>> failed_ = std::make_shared<std::atomic<bool>>(false);
  uint64_t next_seq_ = 0;
  float* barrier_scratch_ = nullptr;  // one device float all-reduced by barrier()
};

}  // namespace zero

#endif  // ZERO_WITH_NCCL
