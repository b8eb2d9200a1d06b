// MpiCommunicator: queue, communication thread, deadline polling and timeout diagnostics.
#include "comm/mpi_communicator.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "core/check.h"

namespace zero {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kStuckTag = 7301;  // control_comm_: "I timed out in collective #k" (payload: k)

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", code);
  return std::string(text, len);
}

int64_t timeout_from_env() {
  const char* env = std::getenv("ZERO_COMM_TIMEOUT_MS");
  if (env == nullptr || *env == '\0') return kDefaultCommTimeoutMs;
  char* end = nullptr;
  long long v = std::strtoll(env, &end, 10);
  return (end != env && *end == '\0' && v > 0) ? v : kDefaultCommTimeoutMs;
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::kSum ? MPI_SUM : MPI_MAX; }

bool shm_disabled_by_env() {
  const char* env = std::getenv("ZERO_SHM_COLLECTIVES");
  return env != nullptr && std::strcmp(env, "0") == 0;
}

}  // namespace

StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::create_world(
    MpiRuntime& runtime, const MpiCommunicatorOptions& options) {
  std::unique_ptr<MpiCommunicator> comm(new MpiCommunicator(runtime, options));
  ZERO_RETURN_IF_ERROR(comm->init());
  comm->thread_ = std::thread([c = comm.get()] { c->thread_main(); });
  return comm;
}

MpiCommunicator::MpiCommunicator(MpiRuntime& runtime, const MpiCommunicatorOptions& options)
    : runtime_(runtime),
      options_(options),
      timeout_ms_(options.timeout_ms > 0 ? options.timeout_ms : timeout_from_env()) {}

Status MpiCommunicator::init() {
  if (!runtime_.register_communicator()) {
    return failed_precondition(
        "MPI provides only MPI_THREAD_SERIALIZED: at most one MpiCommunicator may be alive");
  }
  registered_ = true;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_dup(MPI_COMM_WORLD, &control_comm_);
  if (rc != MPI_SUCCESS) return internal_error("MPI_Comm_dup failed: {}", mpi_error_string(rc));
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(control_comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &world_size_);
  MPI_Comm local = MPI_COMM_NULL;
  rc = MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local);
  if (rc != MPI_SUCCESS) {
    return internal_error("MPI_Comm_split_type(SHARED) failed: {}", mpi_error_string(rc));
  }
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_world_size_);
  MPI_Comm_free(&local);
  // Shared memory when every rank is on this host and none opted out; every rank must take the
  // same path, so the decision is a collective minimum.
  int want_shm = options_.shared_memory && !shm_disabled_by_env() && world_size_ > 1 &&
                 local_world_size_ == world_size_;
  int all_want_shm = 0;
  rc = MPI_Allreduce(&want_shm, &all_want_shm, 1, MPI_INT, MPI_MIN, comm_);
  if (rc != MPI_SUCCESS) return internal_error("MPI_Allreduce failed: {}", mpi_error_string(rc));
  if (all_want_shm) {
    auto shm = ShmCollectives::create(comm_);
    if (shm.ok()) {
      shm_ = std::move(shm).value();
    } else if (rank_ == 0) {
      // Same outcome on every rank (create agrees collectively): Open MPI's collectives still work.
      std::fprintf(stderr, "warning: %s; using MPI collectives\n",
                   shm.status().to_string().c_str());
    }
  }
  return ok_status();
}

MpiCommunicator::~MpiCommunicator() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    // Why join: queued collectives still reference caller buffers and peers expect them.
    thread_.join();
  }
  if (leaked_) {
    runtime_.mark_unclean();  // MPI still owns a request on comm_: freeing it is unsafe
  } else {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    if (control_comm_ != MPI_COMM_NULL) MPI_Comm_free(&control_comm_);
  }
  if (registered_) runtime_.unregister_communicator();
}

std::string MpiCommunicator::describe(const Op& op) const {
  const int64_t bytes = comm_payload_bytes(op.kind, op.numel, op.dtype, world_size_);
  std::string what = fmt::format("{} #{} ({} B, {} x {}", comm_kind_name(op.kind), op.seq, bytes,
                                 op.numel, dtype_name(op.dtype));
  if (op.kind == CommKind::kBroadcast) what += fmt::format(", root {}", op.root);
  return what + ")";
}

// --- Issue side (any thread) ---

CommHandle MpiCommunicator::enqueue(Op op) {
  const int64_t bytes = comm_payload_bytes(op.kind, op.numel, op.dtype, world_size_);
  record(op.kind, bytes);
  op.completion = std::make_shared<PromiseCompletion>();
  CommHandle handle(op.completion);
  {
    std::lock_guard<std::mutex> lock(mu_);
    op.seq = next_seq_++;
    queue_.push_back(std::move(op));
  }
  cv_.notify_one();
  return handle;
}

CommHandle MpiCommunicator::all_reduce_async(void* buf, size_t numel, DType dtype, ReduceOp op) {
  if (numel > 0 && buf == nullptr) return CommHandle::ready(invalid_argument("all_reduce: null"));
  if (numel > static_cast<size_t>(INT_MAX)) {
    return CommHandle::ready(
        invalid_argument("all_reduce: {} elements exceed MPI's int count", numel));
  }
  Op o;
  o.kind = CommKind::kAllReduce;
  o.reduce_op = op;
  o.dtype = dtype;
  o.in = buf;
  o.out = buf;
  o.numel = numel;
  return enqueue(std::move(o));
}

CommHandle MpiCommunicator::reduce_scatter_async(const void* in, void* out, size_t block_numel,
                                                 DType dtype) {
  if (block_numel > 0 && (in == nullptr || out == nullptr)) {
    return CommHandle::ready(invalid_argument("reduce_scatter: null buffer"));
  }
  if (block_numel * world_size_ > static_cast<size_t>(INT_MAX)) {
    return CommHandle::ready(invalid_argument(
        "reduce_scatter: {} x {} elements exceed MPI's int count", block_numel, world_size_));
  }
  Op o;
  o.kind = CommKind::kReduceScatter;
  o.dtype = dtype;
  o.in = in;
  o.out = out;
  o.numel = block_numel;
  return enqueue(std::move(o));
}

CommHandle MpiCommunicator::all_gather_async(const void* in, void* out, size_t block_numel,
                                             DType dtype) {
  if (block_numel > 0 && (in == nullptr || out == nullptr)) {
    return CommHandle::ready(invalid_argument("all_gather: null buffer"));
  }
  if (block_numel * dtype_bytes(dtype) > static_cast<size_t>(INT_MAX)) {
    return CommHandle::ready(
        invalid_argument("all_gather: block of {} elements too large for MPI", block_numel));
  }
  Op o;
  o.kind = CommKind::kAllGather;
  o.dtype = dtype;
  o.in = in;
  o.out = out;
  o.numel = block_numel;
  return enqueue(std::move(o));
}

CommHandle MpiCommunicator::broadcast_async(void* buf, size_t numel, DType dtype, int root) {
  if (root < 0 || root >= world_size_) {
    return CommHandle::ready(
        invalid_argument("broadcast: root {} outside world of {} ranks", root, world_size_));
  }
  if (numel > 0 && buf == nullptr) return CommHandle::ready(invalid_argument("broadcast: null"));
  if (numel * dtype_bytes(dtype) > static_cast<size_t>(INT_MAX)) {
    return CommHandle::ready(invalid_argument("broadcast: {} elements too large for MPI", numel));
  }
  Op o;
  o.kind = CommKind::kBroadcast;
  o.dtype = dtype;
  o.out = buf;
  o.numel = numel;
  o.root = root;
  return enqueue(std::move(o));
}

CommHandle MpiCommunicator::barrier_async() {
  Op o;
  o.kind = CommKind::kBarrier;
  return enqueue(std::move(o));
}

// --- Communication thread ---

void MpiCommunicator::thread_main() {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Why wait: nothing to communicate until a collective is issued or we are told to stop.
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stopping, and every issued collective was executed
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    Status status = poisoned_.ok() ? execute(op) : poisoned_;
    op.completion->fulfil(std::move(status));
  }
  drain_on_exit();
}

Status MpiCommunicator::execute(Op& op) {
  if (shm_) return execute_shm(op);
  const size_t elem_bytes = dtype_bytes(op.dtype);
  const bool widen = op.dtype != DType::kF32;  // 16-bit reductions run in fp32
  const int count = static_cast<int>(op.numel);
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_SUCCESS;
  const char* call = "";
  switch (op.kind) {
    case CommKind::kAllReduce: {
      if (op.numel == 0) return ok_status();  // same sizes on every rank: nobody posts it
      call = "MPI_Iallreduce";
      if (widen) {
        scratch_in_f32_.resize(op.numel);
        convert_to_f32(op.in, op.dtype, scratch_in_f32_.data(), op.numel);
        rc = MPI_Iallreduce(MPI_IN_PLACE, scratch_in_f32_.data(), count, MPI_FLOAT,
                            mpi_op(op.reduce_op), comm_, &request);
      } else {
        rc = MPI_Iallreduce(MPI_IN_PLACE, op.out, count, MPI_FLOAT, mpi_op(op.reduce_op), comm_,
                            &request);
      }
      break;
    }
    case CommKind::kReduceScatter: {
      if (op.numel == 0) return ok_status();
      call = "MPI_Ireduce_scatter_block";
      if (widen) {
        const size_t in_numel = op.numel * world_size_;
        scratch_in_f32_.resize(in_numel);
        scratch_out_f32_.resize(op.numel);
        convert_to_f32(op.in, op.dtype, scratch_in_f32_.data(), in_numel);
        rc = MPI_Ireduce_scatter_block(scratch_in_f32_.data(), scratch_out_f32_.data(), count,
                                       MPI_FLOAT, MPI_SUM, comm_, &request);
      } else {
        rc = MPI_Ireduce_scatter_block(op.in, op.out, count, MPI_FLOAT, MPI_SUM, comm_, &request);
      }
      break;
    }
    case CommKind::kAllGather: {
      if (op.numel == 0) return ok_status();
      call = "MPI_Iallgather";
      const int block_bytes = static_cast<int>(op.numel * elem_bytes);
      const void* own_block =
          static_cast<const char*>(op.out) + static_cast<size_t>(rank_) * op.numel * elem_bytes;
      const void* send = op.in == own_block ? MPI_IN_PLACE : op.in;
      rc = MPI_Iallgather(send, block_bytes, MPI_BYTE, op.out, block_bytes, MPI_BYTE, comm_,
                          &request);
      break;
    }
    case CommKind::kBroadcast: {
      if (op.numel == 0) return ok_status();
      call = "MPI_Ibcast";
      rc = MPI_Ibcast(op.out, static_cast<int>(op.numel * elem_bytes), MPI_BYTE, op.root, comm_,
                      &request);
      break;
    }
    case CommKind::kBarrier:
      call = "MPI_Ibarrier";
      rc = MPI_Ibarrier(comm_, &request);
      break;
  }
  if (rc != MPI_SUCCESS) {
    return internal_error("rank {}: {} failed for {}: {}", rank_, call, describe(op),
                          mpi_error_string(rc));
  }
  ZERO_RETURN_IF_ERROR(wait_with_deadline(&request, op));
  if (widen && op.kind == CommKind::kAllReduce) {
    convert_from_f32(scratch_in_f32_.data(), op.out, op.dtype, op.numel);
  } else if (widen && op.kind == CommKind::kReduceScatter) {
    convert_from_f32(scratch_out_f32_.data(), op.out, op.dtype, op.numel);
  }
  return ok_status();
}

Status MpiCommunicator::execute_shm(const Op& op) {
  if (op.kind != CommKind::kBarrier && op.numel == 0) return ok_status();  // as for MPI: no-op
  shm_->start(op);
  bool timed_out = false;
  ZERO_RETURN_IF_ERROR(poll_with_deadline(
      timeout_ms_.load(), [&]() -> StatusOr<bool> { return shm_->test(); },
      [&] { return shm_->barriers_passed(); }, &timed_out));
  if (!timed_out) return ok_status();
  shm_abandoned_ = true;  // this rank's part may still complete at exit if the peer shows up
  return poison_after_timeout(op);
}

Status MpiCommunicator::wait_with_deadline(MPI_Request* request, const Op& op) {
  bool timed_out = false;
  ZERO_RETURN_IF_ERROR(poll_with_deadline(
      timeout_ms_.load(),
      [&]() -> StatusOr<bool> {
        int flag = 0;
        const int rc = MPI_Test(request, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
          return internal_error("rank {}: {} failed: {}", rank_, describe(op),
                                mpi_error_string(rc));
        }
        return flag != 0;
      },
      [] { return uint64_t{0}; }, &timed_out));
  if (!timed_out) return ok_status();
  abandoned_.push_back(*request);  // MPI owns it until it completes; never freed under us
  return poison_after_timeout(op);
}

Status MpiCommunicator::poll_with_deadline(int64_t timeout_ms,
                                           const std::function<StatusOr<bool>()>& test,
                                           const std::function<uint64_t()>& progress,
                                           bool* timed_out) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  int polls = 0;
  int sleep_us = 1;
  uint64_t last_progress = progress();
  *timed_out = false;
  for (;;) {
    StatusOr<bool> done = test();
    if (!done.ok()) return done.status();
    if (*done) return ok_status();
    if (Clock::now() >= deadline) break;
    if (const uint64_t p = progress(); p != last_progress) {
      last_progress = p;  // a peer just caught up: it is likely to be quick again
      polls = 0;
      sleep_us = 1;
    }
    // Back off: spin briefly (yielding) for small collectives, then sleep so that oversubscribed
    // ranks compute. Never a hard spin: ranks may share cores.
    if (++polls < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
      sleep_us = std::min(sleep_us * 2, std::max(1, options_.poll_sleep_max_us));
    }
  }
  *timed_out = true;
  return ok_status();
}

Status MpiCommunicator::poison_after_timeout(const Op& op) {
  const std::string missing = describe_missing_ranks(op.seq);
  poisoned_ = Status(StatusCode::kDeadlineExceeded,
                     fmt::format("rank {}: collective {} did not complete within {} ms; {}", rank_,
                                 describe(op), timeout_ms_.load(), missing));
  return poisoned_;
}

// Best effort, only after a timeout (zero cost otherwise): every rank that timed out tells every
// other rank "I am stuck in collective #k" on control_comm_, then listens for a grace period for
// the same message from the others. Ranks that never reported did not reach #k (dead, hung, or
// slower than the grace period).
std::string MpiCommunicator::describe_missing_ranks(uint64_t seq) {
  if (world_size_ <= 1) return "no other rank";
  stuck_seq_ = seq;
  for (int r = 0; r < world_size_; ++r) {
    if (r == rank_) continue;
    MPI_Request send = MPI_REQUEST_NULL;
    // The small message is sent eagerly; freeing the request lets it finish in the background.
    if (MPI_Isend(&stuck_seq_, 1, MPI_UINT64_T, r, kStuckTag, control_comm_, &send) ==
        MPI_SUCCESS) {
      MPI_Request_free(&send);
    }
  }
  const int64_t grace_ms = std::clamp<int64_t>(timeout_ms_.load() / 4, 100, 10'000);
  const auto deadline = Clock::now() + std::chrono::milliseconds(grace_ms);
  std::vector<char> reported(world_size_, 0);
  std::vector<std::string> elsewhere;
  reported[rank_] = 1;
  int reports = 1;
  while (reports < world_size_ && Clock::now() < deadline) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kStuckTag, control_comm_, &flag, &status) != MPI_SUCCESS) break;
    if (!flag) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    uint64_t their_seq = 0;
    MPI_Recv(&their_seq, 1, MPI_UINT64_T, status.MPI_SOURCE, kStuckTag, control_comm_,
             MPI_STATUS_IGNORE);
    if (their_seq != seq) {
      elsewhere.push_back(
          fmt::format("rank {} timed out in collective #{}", status.MPI_SOURCE, their_seq));
    } else if (!reported[status.MPI_SOURCE]) {
      reported[status.MPI_SOURCE] = 1;
      ++reports;
    }
  }
  std::vector<int> missing;
  for (int r = 0; r < world_size_; ++r) {
    if (!reported[r]) missing.push_back(r);
  }
  std::string text;
  if (missing.empty()) {
    text = "every rank reported reaching it (an MPI or network failure?)";
  } else {
    text = fmt::format("rank(s) that did not reach it: {}", fmt::join(missing, ", "));
  }
  for (const auto& e : elsewhere) text += "; " + e + " (ranks issued different sequences)";
  return text;
}

void MpiCommunicator::drain_on_exit() {
  const int64_t drain_ms = options_.abandon_drain_ms > 0
                               ? options_.abandon_drain_ms
                               : std::min<int64_t>(timeout_ms_.load(), 10'000);
  if (shm_abandoned_) {
    // Why wait: a late peer may still arrive; finishing our part lets it complete its collective
    // instead of timing out in turn. Unmapping the segment later is local either way.
    bool timed_out = false;
    (void)poll_with_deadline(
        drain_ms, [&]() -> StatusOr<bool> { return shm_->test(); },
        [&] { return shm_->barriers_passed(); }, &timed_out);
  }
  if (!abandoned_.empty()) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(drain_ms);
    // Why wait: a late peer may still complete the abandoned collectives; then MPI is clean and the
    // communicator can be freed and MPI finalized normally.
    for (;;) {
      int flag = 0;
      if (MPI_Testall(static_cast<int>(abandoned_.size()), abandoned_.data(), &flag,
                      MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
        break;
      }
      if (flag) {
        abandoned_.clear();
        break;
      }
      if (Clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    leaked_ = !abandoned_.empty();
  }
  // Consume "stuck" reports from peers that timed out while we did not, so none stays unmatched.
  for (;;) {
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kStuckTag, control_comm_, &flag, &status) != MPI_SUCCESS ||
        !flag) {
      break;
    }
    uint64_t their_seq = 0;
    MPI_Recv(&their_seq, 1, MPI_UINT64_T, status.MPI_SOURCE, kStuckTag, control_comm_,
             MPI_STATUS_IGNORE);
  }
}

void MpiCommunicator::abort_job(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  // MPI_COMM_WORLD, not comm_: the whole job ends, whatever group this communicator spans.
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; in case an implementation does
}

}  // namespace zero
