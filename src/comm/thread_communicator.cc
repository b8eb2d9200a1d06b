// ThreadCommunicator (thread_communicator.h): rendezvous collectives among threads.
#include "comm/thread_communicator.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "comm/reduce16.h"
#include "core/check.h"

namespace zero {

// One collective call as a rank made it.
struct Call : CollectiveCall {
  bool matches(const Call& o) const {
    return kind == o.kind && reduce_op == o.reduce_op && dtype == o.dtype && numel == o.numel &&
           root == o.root;
  }
  std::string describe() const {
    return fmt::format("{}({} x {}{})", comm_kind_name(kind), numel, dtype_name(dtype),
                       kind == CommKind::kBroadcast ? fmt::format(", root {}", root) : "");
  }
};

class ThreadGroup {
 public:
  ThreadGroup(int world, int64_t timeout_ms)
      : world_(world),
        timeout_ms_(timeout_ms),
        calls_(static_cast<size_t>(world)),
        results_(static_cast<size_t>(world)),
        seq_(static_cast<size_t>(world), 0) {}

  int world() const { return world_; }
  int64_t timeout_ms() const { return timeout_ms_; }

  // Rank `rank`'s part of its next collective. Returns its result.
  //
  // Why no per-collective sequencing is needed: the last rank to arrive performs collective k
  // under the lock, so every call of k is consumed before any rank can return; a fast rank may
  // then deposit its call for k + 1 while slower ones are still waking up, but k + 1 cannot be
  // performed before they all arrive, so their result slots for k are read first.
  Status collective(int rank, const Call& call) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t seq = seq_[static_cast<size_t>(rank)]++;
    calls_[static_cast<size_t>(rank)] = call;
    if (++arrived_ == world_) {
      const Status s = perform();
      for (Status& r : results_) r = s;
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return s;
    }
    const uint64_t gen = generation_;
    const bool finished = cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms_),
                                       [&] { return generation_ != gen; });
    if (!finished) {
      return Status(StatusCode::kDeadlineExceeded,
                    fmt::format("rank {}: collective #{} {} did not complete within {} ms", rank,
                                seq, call.describe(), timeout_ms_));
    }
    return results_[static_cast<size_t>(rank)];
  }

 private:
  // REQUIRES: mu_ held, every rank's call in calls_. Performs the collective for all ranks.
  Status perform() {
    const Call& c0 = calls_[0];
    for (int r = 1; r < world_; ++r) {
      if (!calls_[static_cast<size_t>(r)].matches(c0)) {
        return invalid_argument("collectives do not match: rank 0 called {}, rank {} called {}",
                                c0.describe(), r, calls_[static_cast<size_t>(r)].describe());
      }
    }
    const size_t esize = dtype_bytes(c0.dtype);
    const size_t n = c0.numel;
    std::vector<const void*> inputs(static_cast<size_t>(world_));
    switch (c0.kind) {
      case CommKind::kAllReduce: {
        scratch_.resize(n * esize);
        for (int r = 0; r < world_; ++r)
          inputs[static_cast<size_t>(r)] = calls_[static_cast<size_t>(r)].out;
        reduce_reference(inputs, scratch_.data(), n, c0.dtype, c0.reduce_op);
        for (const Call& c : calls_) std::memcpy(c.out, scratch_.data(), n * esize);
        break;
      }
      case CommKind::kReduceScatter: {
        scratch_.resize(static_cast<size_t>(world_) * n * esize);
        for (int dst = 0; dst < world_; ++dst) {
          for (int r = 0; r < world_; ++r) {
            inputs[static_cast<size_t>(r)] =
                static_cast<const std::byte*>(calls_[static_cast<size_t>(r)].in) +
                static_cast<size_t>(dst) * n * esize;
          }
          reduce_reference(inputs, scratch_.data() + static_cast<size_t>(dst) * n * esize, n,
                           c0.dtype, ReduceOp::kSum);
        }
        for (int dst = 0; dst < world_; ++dst) {
          std::memcpy(calls_[static_cast<size_t>(dst)].out,
                      scratch_.data() + static_cast<size_t>(dst) * n * esize, n * esize);
        }
        break;
      }
      case CommKind::kAllGather: {
        scratch_.resize(static_cast<size_t>(world_) * n * esize);
        for (int r = 0; r < world_; ++r) {
          std::memcpy(scratch_.data() + static_cast<size_t>(r) * n * esize,
                      calls_[static_cast<size_t>(r)].in, n * esize);
        }
        for (const Call& c : calls_) std::memcpy(c.out, scratch_.data(), scratch_.size());
        break;
      }
      case CommKind::kBroadcast: {
        if (c0.root < 0 || c0.root >= world_) {
          return invalid_argument("broadcast: root {} is not a rank of {}", c0.root, world_);
        }
        scratch_.assign(
            static_cast<const std::byte*>(calls_[static_cast<size_t>(c0.root)].out),
            static_cast<const std::byte*>(calls_[static_cast<size_t>(c0.root)].out) + n * esize);
        for (const Call& c : calls_) std::memcpy(c.out, scratch_.data(), n * esize);
        break;
      }
      case CommKind::kBarrier: break;
    }
    return ok_status();
  }

  const int world_;
  const int64_t timeout_ms_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Call> calls_;         // per rank, its pending call; guarded by mu_
  std::vector<Status> results_;     // per rank, its last collective's result; guarded by mu_
  std::vector<uint64_t> seq_;       // per rank, collectives issued (for messages); guarded by mu_
  int arrived_ = 0;                 // guarded by mu_
  uint64_t generation_ = 0;         // collectives performed; guarded by mu_
  std::vector<std::byte> scratch_;  // guarded by mu_
};

std::vector<std::unique_ptr<ThreadCommunicator>> ThreadCommunicator::create_group(
    int world_size, int64_t timeout_ms) {
  ZERO_CHECK(world_size >= 1, "thread world size ", world_size);
  auto group = std::make_shared<ThreadGroup>(world_size, timeout_ms);
  std::vector<std::unique_ptr<ThreadCommunicator>> comms;
  for (int r = 0; r < world_size; ++r) {
    comms.push_back(std::unique_ptr<ThreadCommunicator>(new ThreadCommunicator(group, r)));
  }
  return comms;
}

void ThreadCommunicator::run(int world_size, const std::function<void(Communicator&)>& fn) {
  auto comms = create_group(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] { fn(*comms[static_cast<size_t>(r)]); });
  }
  for (auto& t : threads) t.join();
}

ThreadCommunicator::~ThreadCommunicator() = default;

StatusOr<std::unique_ptr<ThreadCommunicator>> ThreadCommunicator::duplicate() {
  // Rank 0 makes the group and broadcasts where it is (the ranks share one address space); the
  // barrier keeps rank 0's pointer alive until every rank holds its own reference.
  std::shared_ptr<ThreadGroup> group;
  if (rank_ == 0) group = std::make_shared<ThreadGroup>(group_->world(), group_->timeout_ms());
  const std::shared_ptr<ThreadGroup>* address = &group;
  static_assert(sizeof(address) % 4 == 0);  // moved verbatim as fp32 words
  ZERO_RETURN_IF_ERROR(broadcast(&address, sizeof(address) / 4, DType::kF32, 0)
                           .with_context("duplicating a thread communicator"));
  if (rank_ != 0) group = *address;
  ZERO_RETURN_IF_ERROR(barrier().with_context("duplicating a thread communicator"));
  return std::unique_ptr<ThreadCommunicator>(new ThreadCommunicator(std::move(group), rank_));
}

int ThreadCommunicator::world_size() const { return group_->world(); }

CommHandle ThreadCommunicator::all_reduce_async(void* buf, size_t numel, DType dtype, ReduceOp op) {
  record(CommKind::kAllReduce,
         comm_payload_bytes(CommKind::kAllReduce, numel, dtype, world_size()));
  Call c{{CommKind::kAllReduce, op, dtype, buf, buf, numel, 0}};
  return CommHandle::ready(group_->collective(rank_, c));
}

CommHandle ThreadCommunicator::reduce_scatter_async(const void* in, void* out, size_t block_numel,
                                                    DType dtype) {
  record(CommKind::kReduceScatter,
         comm_payload_bytes(CommKind::kReduceScatter, block_numel, dtype, world_size()));
  Call c{{CommKind::kReduceScatter, ReduceOp::kSum, dtype, in, out, block_numel, 0}};
  return CommHandle::ready(group_->collective(rank_, c));
}

CommHandle ThreadCommunicator::all_gather_async(const void* in, void* out, size_t block_numel,
                                                DType dtype) {
  record(CommKind::kAllGather,
         comm_payload_bytes(CommKind::kAllGather, block_numel, dtype, world_size()));
  Call c{{CommKind::kAllGather, ReduceOp::kSum, dtype, in, out, block_numel, 0}};
  return CommHandle::ready(group_->collective(rank_, c));
}

CommHandle ThreadCommunicator::broadcast_async(void* buf, size_t numel, DType dtype, int root) {
  record(CommKind::kBroadcast,
         comm_payload_bytes(CommKind::kBroadcast, numel, dtype, world_size()));
  Call c{{CommKind::kBroadcast, ReduceOp::kSum, dtype, buf, buf, numel, root}};
  return CommHandle::ready(group_->collective(rank_, c));
}

CommHandle ThreadCommunicator::barrier_async() {
  record(CommKind::kBarrier, 0);
  return CommHandle::ready(group_->collective(rank_, Call{}));
}

void ThreadCommunicator::abort_job(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(exit_code);
}

}  // namespace zero
