// MpiCommunicator: the CPU backend. Collectives run on one communication thread per communicator
// (a FIFO), polled against a deadline, so a hung or dead peer turns into a kDeadlineExceeded Status
// instead of a hang, and communication overlaps computation. When every rank is on one host they
// run through a shared-memory segment (ShmCollectives), else as non-blocking MPI collectives.
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_runtime.h"
#include "comm/shm_collectives.h"

namespace zero {

inline constexpr int64_t kDefaultCommTimeoutMs = 30LL * 60 * 1000;  // 30 minutes

struct MpiCommunicatorOptions {
  // Per-collective timeout, measured from the moment the communication thread starts it. <= 0
  // means: the environment variable ZERO_COMM_TIMEOUT_MS if set, else kDefaultCommTimeoutMs.
  int64_t timeout_ms = 0;
  // After a timeout, how long the destructor keeps polling the abandoned collective (a late peer
  // may still complete it, leaving MPI clean). <= 0 means min(timeout, 10 s).
  int64_t abandon_drain_ms = 0;
  // Upper bound of the back-off sleep between MPI_Test polls. Open MPI has no progress thread, so a
  // collective advances only inside MPI_Test: lower = less latency, more CPU taken from compute.
  int poll_sleep_max_us = 200;
  // Run the collectives through shared memory (ShmCollectives) when every rank is on this host.
  // The environment variable ZERO_SHM_COLLECTIVES=0 turns it off (then Open MPI's collectives run).
  bool shared_memory = true;
};

// Threading model: after construction only the communication thread calls MPI for this communicator
// (construction and destruction call it from the owning thread, before the thread starts and after
// it joined). Collectives are executed in issue order; each blocks the communication thread until
// it completes, times out or fails.
//
// After a timeout the communicator is poisoned: that collective's handle returns kDeadlineExceeded
// naming this rank, the collective kind, its sequence number, its size and the ranks that did not
// report reaching it; every later collective fails at once with the same message. The caller is
// expected to return the Status and exit non-zero.
class MpiCommunicator final : public Communicator {
 public:
  // Duplicates MPI_COMM_WORLD. Collective over all ranks of the world.
  // REQUIRES: `runtime` outlives the communicator.
  static StatusOr<std::unique_ptr<MpiCommunicator>> create_world(
      MpiRuntime& runtime, const MpiCommunicatorOptions& options = {});

  // Another communicator over the same ranks, with its own MPI communicator and communication
  // thread (collective over all ranks): for collectives issued from another thread in their own
  // order (the device path's staged transport, device/stream_collectives.h).
  StatusOr<std::unique_ptr<MpiCommunicator>> duplicate() {
    return create_world(runtime_, options_);
  }
  // Finishes every queued collective, stops the communication thread and frees the MPI
  // communicators. If a timed-out collective could not be drained, the MPI communicator is leaked
  // and the runtime is told not to finalize.
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  int local_rank() const override { return local_rank_; }
  int local_world_size() const override { return local_world_size_; }
  std::string_view backend_name() const override { return "mpi"; }
  // True when the collectives run through shared memory (decided at creation, same on every rank).
  bool shared_memory() const { return shm_ != nullptr; }

  CommHandle all_reduce_async(void* buf, size_t numel, DType dtype, ReduceOp op) override;
  CommHandle reduce_scatter_async(const void* in, void* out, size_t block_numel,
                                  DType dtype) override;
  CommHandle all_gather_async(const void* in, void* out, size_t block_numel, DType dtype) override;
  CommHandle broadcast_async(void* buf, size_t numel, DType dtype, int root) override;
  CommHandle barrier_async() override;
  [[noreturn]] void abort_job(int exit_code) override;

  // Timeout for collectives started after this call. Thread-safe.
  void set_timeout_ms(int64_t timeout_ms) { timeout_ms_.store(timeout_ms); }
  int64_t timeout_ms() const { return timeout_ms_.load(); }

 private:
  struct Op : CollectiveCall {
    uint64_t seq = 0;  // 0-based issue index on this communicator
    std::shared_ptr<PromiseCompletion> completion;
  };

  MpiCommunicator(MpiRuntime& runtime, const MpiCommunicatorOptions& options);
  Status init();  // the MPI setup (collective); before the thread starts

  CommHandle enqueue(Op op);
  void thread_main();
  // Communication thread:
  Status execute(Op& op);
  Status execute_shm(const Op& op);
  Status wait_with_deadline(MPI_Request* request, const Op& op);
  // Calls `test` (true once the collective finished) with back-off until it returns true (OK), it
  // fails (its Status), or `timeout_ms` passes (OK with *timed_out set). The back-off restarts
  // whenever `progress()` changes (a chunk of a long collective passed a barrier).
  Status poll_with_deadline(int64_t timeout_ms, const std::function<StatusOr<bool>()>& test,
                            const std::function<uint64_t()>& progress, bool* timed_out);
  Status poison_after_timeout(const Op& op);         // the kDeadlineExceeded diagnosis; poisons
  std::string describe_missing_ranks(uint64_t seq);  // communication thread
  void drain_on_exit();                              // communication thread
  std::string describe(const Op& op) const;

  MpiRuntime& runtime_;
  MpiCommunicatorOptions options_;
  std::atomic<int64_t> timeout_ms_;
  bool registered_ = false;
  MPI_Comm comm_ = MPI_COMM_NULL;          // the collectives
  MPI_Comm control_comm_ = MPI_COMM_NULL;  // timeout diagnostics (point-to-point)
  int rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_world_size_ = 1;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;   // guarded by mu_
  uint64_t next_seq_ = 0;  // guarded by mu_
  bool stopping_ = false;  // guarded by mu_

  // Owned by the communication thread.
  Status poisoned_;
  std::vector<MPI_Request> abandoned_;   // timed-out requests MPI still owns
  std::unique_ptr<ShmCollectives> shm_;  // null: Open MPI's collectives
  bool shm_abandoned_ = false;           // shm_ holds a timed-out collective (drained at exit)
  uint64_t stuck_seq_ = 0;               // send buffer of the "stuck at #k" messages
  std::vector<float> scratch_in_f32_;    // 16-bit reductions run in fp32
  std::vector<float> scratch_out_f32_;
  bool leaked_ = false;  // set by the thread before it exits

  std::thread thread_;  // last: started once everything above is initialised
};

}  // namespace zero
