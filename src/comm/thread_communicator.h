// ThreadCommunicator: a world of N ranks as threads of one process (issue 10 item 8), so the ZeRO
// pieces (GradReducer, ParamCoordinator, the engine) are tested beside their code across worlds
// 2-4 without mpirun, and under ThreadSanitizer. The mpirun ladder stays the cross-process proof.
//
// Collectives are synchronous rendezvous: each rank's call waits for the matching call of every
// other rank; the last to arrive performs the collective for all of them (16-bit values reduced in
// fp32 in rank order, exactly comm/reduce16.h's reduce_reference, as MpiCommunicator does) and
// releases them. The async forms return completed handles. Calls that do not match across ranks
// (kind, size, dtype, op, root) fail on every rank with a message naming both calls; a rank that
// never arrives fails the others after `timeout_ms`.
//
// Thread safety: each communicator is used by one thread (its rank's), as MPI ranks are.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace zero {

class ThreadGroup;

class ThreadCommunicator final : public Communicator {
 public:
  // `world_size` communicators of one group; element r is rank r. local_world_size = world_size.
  static std::vector<std::unique_ptr<ThreadCommunicator>> create_group(int world_size,
                                                                       int64_t timeout_ms = 60000);
  // Runs fn(comm) for every rank of a new group, each on its own thread, and joins them.
  static void run(int world_size, const std::function<void(Communicator& comm)>& fn);

  ~ThreadCommunicator() override;

  // A new communicator over the same ranks with its own rendezvous (MPI_Comm_dup's role): a
  // collective of this group, which every rank calls. Its collectives never match this group's,
  // so another thread of each rank may issue them (the CPU backend's comm stream does, for the
  // engine's device path, while the rank's own thread issues the loss all-reduce here).
  StatusOr<std::unique_ptr<ThreadCommunicator>> duplicate();

  int rank() const override { return rank_; }
  int world_size() const override;
  int local_rank() const override { return rank_; }
  int local_world_size() const override { return world_size(); }
  std::string_view backend_name() const override { return "threads"; }

  CommHandle all_reduce_async(void* buf, size_t numel, DType dtype, ReduceOp op) override;
  CommHandle reduce_scatter_async(const void* in, void* out, size_t block_numel,
                                  DType dtype) override;
  CommHandle all_gather_async(const void* in, void* out, size_t block_numel, DType dtype) override;
  CommHandle broadcast_async(void* buf, size_t numel, DType dtype, int root) override;
  CommHandle barrier_async() override;
  [[noreturn]] void abort_job(int exit_code) override;

 private:
  ThreadCommunicator(std::shared_ptr<ThreadGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  std::shared_ptr<ThreadGroup> group_;
  int rank_;
};

}  // namespace zero
