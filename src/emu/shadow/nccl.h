// NCCL stand-in for the CPU emulator (docs/emu.md, "NCCL"): found before the real <nccl.h> by
// emulated targets, it implements the subset NcclCommunicator uses with ranks as threads of one
// process. Ranks rendezvous by ncclUniqueId in ncclCommInitRank; a collective is an operation
// queued on its rank's emulated stream (stream_emu.h), so it starts in stream order, after the
// events the stream waits for, and holds the stream (as NCCL's kernel does) until every rank's
// stream has reached the matching call; the last one to arrive moves the data for all (device
// memory is host memory). Reductions go in rank order 0, 1, ...; 16-bit values are widened to fp32
// and rounded back after every step, as NCCL's kernels do (not once, as comm/reduce16.h's oracle),
// so fp32 results equal ThreadCommunicator's bit for bit and bf16 ones where no partial sum
// rounds. Calls that do not match across ranks set ncclInvalidUsage on every rank's communicator
// (ncclCommGetAsyncError), move nothing and hang (as NCCL's kernels would) until aborted;
// ncclCommAbort releases the aborting rank's own stuck collective and gives its peers
// ncclRemoteError. A test may fail one rank's next collective (set_collective_fault).
// Not emulated: point-to-point (ncclSend / ncclRecv), ncclReduce, ncclAvg, integer and fp64
// payloads (ncclInvalidArgument), non-blocking communicators (ncclCommInitRankConfig), user
// buffer registration, NCCL's own ring / tree orders.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "emu/runtime_emu.h"

#define NCCL_MAJOR 2
#define NCCL_MINOR 0
#define NCCL_PATCH 0
#define NCCL_UNIQUE_ID_BYTES 128

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef enum {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9
} ncclDataType_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

namespace zero::emu::nccl {

enum class Kind { kAllReduce, kReduceScatter, kAllGather, kBroadcast };

inline const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kAllReduce: return "ncclAllReduce";
    case Kind::kReduceScatter: return "ncclReduceScatter";
    case Kind::kAllGather: return "ncclAllGather";
    case Kind::kBroadcast: return "ncclBroadcast";
  }
  return "?";
}

// One rank's part of a collective, as it called it.
struct Part {
  Kind kind = Kind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // NCCL's count: per rank block for reduce-scatter / all-gather
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;

  bool matches(const Part& o) const {
    return kind == o.kind && count == o.count && type == o.type && op == o.op && root == o.root;
  }
  std::string describe() const {
    return std::string(kind_name(kind)) + "(count " + std::to_string(count) + ", type " +
           std::to_string(static_cast<int>(type)) + ", op " + std::to_string(static_cast<int>(op)) +
           ", root " + std::to_string(root) + ")";
  }
};

inline size_t type_bytes(ncclDataType_t type) { return type == ncclFloat32 ? 4 : 2; }

inline float load(const std::byte* p, ncclDataType_t type) {
  switch (type) {
    case ncclBfloat16: {
      __nv_bfloat16 v;
      std::memcpy(&v, p, sizeof(v));
      return __bfloat162float(v);
    }
    case ncclFloat16: {
      __half v;
      std::memcpy(&v, p, sizeof(v));
      return __half2float(v);
    }
    default: {
      float v;
      std::memcpy(&v, p, sizeof(v));
      return v;
    }
  }
}

// Stores `v` rounded to nearest even in `type`.
inline void store(std::byte* p, float v, ncclDataType_t type) {
  switch (type) {
    case ncclBfloat16: {
      const __nv_bfloat16 r = __float2bfloat16_rn(v);
      std::memcpy(p, &r, sizeof(r));
      return;
    }
    case ncclFloat16: {
      const __half r = __float2half_rn(v);
      std::memcpy(p, &r, sizeof(r));
      return;
    }
    default: std::memcpy(p, &v, sizeof(v)); return;
  }
}

inline float apply(ncclRedOp_t op, float a, float b) {
  switch (op) {
    case ncclProd: return a * b;
    case ncclMax: return std::max(a, b);
    case ncclMin: return std::min(a, b);
    default: return a + b;
  }
}

// out[i] = inputs[0][i] op inputs[1][i] op ..., in rank order, each step in fp32 rounded to
// `type` (a no-op for fp32). `out` is scratch, distinct from every input.
inline void reduce(const std::vector<const std::byte*>& inputs, std::byte* out, size_t count,
                   ncclDataType_t type, ncclRedOp_t op) {
  const size_t esize = type_bytes(type);
  std::memcpy(out, inputs[0], count * esize);
  for (size_t r = 1; r < inputs.size(); ++r) {
    for (size_t i = 0; i < count; ++i) {
      store(out + i * esize,
            apply(op, load(out + i * esize, type), load(inputs[r] + i * esize, type)), type);
    }
  }
}

// Failure injection (tests): rank `rank`'s collective after `skip` more of its own (in any
// communicator, counted from when the fault was set) fails as a broken connection does on GPUs:
// that rank's communicator gets `error` as its asynchronous error (ncclCommGetAsyncError) and its
// collective never completes; the peers' stay in theirs until the failing rank aborts, then see
// ncclRemoteError. One fault at a time, process-wide; set_collective_fault({}) clears it.
struct CollectiveFault {
  int rank = -1;  // -1: none
  int skip = 0;
  ncclResult_t error = ncclSystemError;
};

struct FaultState {
  std::mutex mu;
  CollectiveFault fault;  // guarded by mu
};

inline FaultState& fault_state() {
  static FaultState* state = new FaultState;  // never destroyed: streams may run at exit
  return *state;
}

inline void set_collective_fault(const CollectiveFault& fault) {
  const std::lock_guard<std::mutex> lock(fault_state().mu);
  fault_state().fault = fault;
}

// Whether rank `rank`'s collective starting now is the one to fail (then the fault is spent).
inline bool take_collective_fault(int rank, ncclResult_t* error) {
  FaultState& state = fault_state();
  const std::lock_guard<std::mutex> lock(state.mu);
  if (state.fault.rank != rank) return false;
  if (state.fault.skip-- > 0) return false;
  *error = state.fault.error;
  state.fault = {};
  return true;
}

// The ranks of one communicator (one unique id).
class Clique {
 public:
  explicit Clique(int nranks)
      : nranks_(nranks),
        joined_(static_cast<size_t>(nranks), false),
        devices_(static_cast<size_t>(nranks), -1),
        parts_(static_cast<size_t>(nranks)),
        errors_(static_cast<size_t>(nranks), ncclSuccess),
        aborted_(static_cast<size_t>(nranks), false) {}

  int nranks() const { return nranks_; }

  // ncclCommInitRank's rendezvous: returns once every rank joined (or an error).
  ncclResult_t join(int rank, int device) {
    std::unique_lock<std::mutex> lock(mu_);
    if (joined_[static_cast<size_t>(rank)]) {
      std::fprintf(stderr, "zero emu nccl: ncclCommInitRank: rank %d joined twice\n", rank);
      return ncclInvalidUsage;
    }
    joined_[static_cast<size_t>(rank)] = true;
    devices_[static_cast<size_t>(rank)] = device;
    ++num_joined_;
    cv_.notify_all();
    // Why a deadline: a rank that failed before its init must not hang the test for ever.
    if (!cv_.wait_for(lock, std::chrono::seconds(60), [&] { return num_joined_ == nranks_; })) {
      std::fprintf(stderr,
                   "zero emu nccl: ncclCommInitRank: rank %d waited 60 s, %d of %d joined\n", rank,
                   num_joined_, nranks_);
      return ncclSystemError;
    }
    for (int r = 0; r < nranks_; ++r) {
      if (r != rank && devices_[static_cast<size_t>(r)] == device) {
        std::fprintf(stderr,
                     "zero emu nccl: ncclCommInitRank: duplicate GPU: ranks %d and %d both on "
                     "device %d\n",
                     rank, r, device);
        return ncclInvalidUsage;
      }
    }
    return ncclSuccess;
  }

  // Rank `rank`'s part of its next collective, run by its stream's worker: waits until every rank
  // arrived (or the clique was aborted); the last to arrive moves the data for all.
  // Why no per-collective sequence number: as ThreadCommunicator's ThreadGroup, the last arrival
  // performs collective k under the lock, so every part of k is consumed before any rank moves on.
  void run(int rank, const Part& part) {
    std::unique_lock<std::mutex> lock(mu_);
    if (aborted_[static_cast<size_t>(rank)]) return;  // NCCL enqueues nothing after an abort
    if (ncclResult_t error; take_collective_fault(rank, &error)) {
      // The injected failure: this rank's part never arrives; it stays stuck until it aborts.
      errors_[static_cast<size_t>(rank)] = error;
      cv_.wait(lock, [&] { return aborted_[static_cast<size_t>(rank)]; });
      return;
    }
    parts_[static_cast<size_t>(rank)] = part;
    if (++arrived_ == nranks_) {
      if (!report_mismatch()) {
        perform();
        arrived_ = 0;
        ++generation_;
        cv_.notify_all();
        return;
      }
      // Mismatched calls: every rank's error is set, and all of them stay in the collective, as
      // NCCL's kernels would hang, until each aborts its communicator.
    }
    // Why wait here, holding the stream: the collective completes only once every rank's stream
    // has reached it (or this rank aborts, tearing its part down).
    const uint64_t generation = generation_;
    cv_.wait(lock,
             [&] { return generation_ != generation || aborted_[static_cast<size_t>(rank)]; });
  }

  // ncclCommAbort by `rank`: its own collective in flight (and later ones) give up at once; the
  // peers' stay stuck in theirs, as on GPUs, until they abort too, with ncclRemoteError as their
  // asynchronous error (their peer is gone).
  void abort(int rank) {
    const std::lock_guard<std::mutex> lock(mu_);
    aborted_[static_cast<size_t>(rank)] = true;
    for (int r = 0; r < nranks_; ++r) {
      ncclResult_t& error = errors_[static_cast<size_t>(r)];
      if (r != rank && error == ncclSuccess) error = ncclRemoteError;
    }
    cv_.notify_all();
  }

  ncclResult_t error(int rank) {
    const std::lock_guard<std::mutex> lock(mu_);
    return errors_[static_cast<size_t>(rank)];
  }

 private:
  // REQUIRES: mu_ held, every rank's part in parts_. True (every rank's error set to
  // ncclInvalidUsage, the calls printed) when the parts do not match.
  bool report_mismatch() {
    const Part& p0 = parts_[0];
    for (int r = 1; r < nranks_; ++r) {
      if (!parts_[static_cast<size_t>(r)].matches(p0)) {
        std::fprintf(stderr,
                     "zero emu nccl: collectives do not match: rank 0 called %s, rank %d %s\n",
                     p0.describe().c_str(), r, parts_[static_cast<size_t>(r)].describe().c_str());
        for (ncclResult_t& e : errors_) e = ncclInvalidUsage;
        return true;
      }
    }
    return false;
  }

  // REQUIRES: mu_ held, every rank's part in parts_, matching.
  void perform() {
    const Part& p0 = parts_[0];
    const size_t esize = type_bytes(p0.type);
    const size_t block_bytes = p0.count * esize;
    const auto send = [&](int r) {
      return static_cast<const std::byte*>(parts_[static_cast<size_t>(r)].send);
    };
    const auto recv = [&](int r) {
      return static_cast<std::byte*>(parts_[static_cast<size_t>(r)].recv);
    };
    std::vector<const std::byte*> inputs(static_cast<size_t>(nranks_));
    // Why a scratch copy: send and recv may alias (in place), so every input is read first.
    switch (p0.kind) {
      case Kind::kAllReduce:
        scratch_.resize(block_bytes);
        for (int r = 0; r < nranks_; ++r) inputs[static_cast<size_t>(r)] = send(r);
        reduce(inputs, scratch_.data(), p0.count, p0.type, p0.op);
        for (int r = 0; r < nranks_; ++r) std::memcpy(recv(r), scratch_.data(), block_bytes);
        break;
      case Kind::kReduceScatter:
        scratch_.resize(static_cast<size_t>(nranks_) * block_bytes);
        for (int dst = 0; dst < nranks_; ++dst) {
          for (int r = 0; r < nranks_; ++r) {
            inputs[static_cast<size_t>(r)] = send(r) + static_cast<size_t>(dst) * block_bytes;
          }
          reduce(inputs, scratch_.data() + static_cast<size_t>(dst) * block_bytes, p0.count,
                 p0.type, p0.op);
        }
        for (int r = 0; r < nranks_; ++r) {
          std::memcpy(recv(r), scratch_.data() + static_cast<size_t>(r) * block_bytes, block_bytes);
        }
        break;
      case Kind::kAllGather:
        scratch_.resize(static_cast<size_t>(nranks_) * block_bytes);
        for (int r = 0; r < nranks_; ++r) {
          std::memcpy(scratch_.data() + static_cast<size_t>(r) * block_bytes, send(r), block_bytes);
        }
        for (int r = 0; r < nranks_; ++r) std::memcpy(recv(r), scratch_.data(), scratch_.size());
        break;
      case Kind::kBroadcast:
        scratch_.assign(send(p0.root), send(p0.root) + block_bytes);
        for (int r = 0; r < nranks_; ++r) std::memcpy(recv(r), scratch_.data(), block_bytes);
        break;
    }
  }

  const int nranks_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> joined_;          // guarded by mu_
  std::vector<int> devices_;          // guarded by mu_
  int num_joined_ = 0;                // guarded by mu_
  std::vector<Part> parts_;           // per rank, its pending part; guarded by mu_
  std::vector<ncclResult_t> errors_;  // per rank, its asynchronous error; guarded by mu_
  int arrived_ = 0;                   // guarded by mu_
  uint64_t generation_ = 0;           // collectives performed; guarded by mu_
  std::vector<bool> aborted_;         // per rank, ncclCommAbort called; guarded by mu_
  std::vector<std::byte> scratch_;    // guarded by mu_
};

// Cliques still gathering their ranks, by unique id (dropped once complete).
struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<Clique>> forming;
};

inline Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: ranks may still be joining at exit
  return *r;
}

}  // namespace zero::emu::nccl

// A communicator: one rank of a clique. Queued collectives hold the clique, so destroying or
// aborting the communicator under them is safe.
struct ncclComm {
  std::shared_ptr<zero::emu::nccl::Clique> clique;
  int rank = 0;
};
typedef struct ncclComm* ncclComm_t;

inline const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::memset(id->internal, 0, sizeof(id->internal));
  const uint64_t words[3] = {0x7a65726f656d75ULL /* "zeroemu" */, ++counter, rng()};
  std::memcpy(id->internal, words, sizeof(words));
  return ncclSuccess;
}

// Blocks until all `nranks` ranks called it with the same id (on their own threads), as NCCL does.
inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  namespace en = zero::emu::nccl;
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  *comm = nullptr;
  const std::string key(id.internal, sizeof(id.internal));
  std::shared_ptr<en::Clique> clique;
  {
    en::Registry& reg = en::registry();
    const std::lock_guard<std::mutex> lock(reg.mu);
    std::shared_ptr<en::Clique>& slot = reg.forming[key];
    if (slot == nullptr) slot = std::make_shared<en::Clique>(nranks);
    if (slot->nranks() != nranks) {
      std::fprintf(stderr, "zero emu nccl: ncclCommInitRank: rank %d says %d ranks, another %d\n",
                   rank, nranks, slot->nranks());
      return ncclInvalidUsage;
    }
    clique = slot;
  }
  const ncclResult_t joined = clique->join(rank, zero::emu::t_current_device);
  {
    en::Registry& reg = en::registry();
    const std::lock_guard<std::mutex> lock(reg.mu);
    auto it = reg.forming.find(key);
    if (it != reg.forming.end() && it->second == clique) reg.forming.erase(it);
  }
  if (joined != ncclSuccess) return joined;
  *comm = new ncclComm{std::move(clique), rank};
  return ncclSuccess;
}

inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

inline ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->clique->abort(comm->rank);
  delete comm;
  return ncclSuccess;
}

inline ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr) return ncclInvalidArgument;
  *async_error = comm->clique->error(comm->rank);
  return ncclSuccess;
}

inline ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr) return ncclInvalidArgument;
  *count = comm->clique->nranks();
  return ncclSuccess;
}

inline ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

// Group calls (a unit's owner broadcasts): each collective is queued at its call anyway, in issue
// order on every rank, which is one order NCCL's grouped launch may take. Only the nesting is
// checked, per thread as NCCL's: an End without a Start is ncclInvalidUsage.
namespace zero::emu::nccl {
inline thread_local int t_group_depth = 0;
}  // namespace zero::emu::nccl

inline ncclResult_t ncclGroupStart() {
  ++zero::emu::nccl::t_group_depth;
  return ncclSuccess;
}

inline ncclResult_t ncclGroupEnd() {
  if (zero::emu::nccl::t_group_depth == 0) {
    std::fprintf(stderr, "zero emu nccl: ncclGroupEnd without ncclGroupStart\n");
    return ncclInvalidUsage;
  }
  --zero::emu::nccl::t_group_depth;
  return ncclSuccess;
}

namespace zero::emu::nccl {

// Queues rank comm->rank's part on `stream` (count 0: nothing, as NCCL).
inline ncclResult_t enqueue(const Part& part, ncclComm_t comm, cudaStream_t stream) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (part.type != ncclFloat32 && part.type != ncclBfloat16 && part.type != ncclFloat16) {
    std::fprintf(stderr, "zero emu nccl: %s: data type %d is not emulated\n", kind_name(part.kind),
                 static_cast<int>(part.type));
    return ncclInvalidArgument;
  }
  if (part.op == ncclAvg || part.op < ncclSum || part.op > ncclAvg) {
    std::fprintf(stderr, "zero emu nccl: %s: reduction op %d is not emulated\n",
                 kind_name(part.kind), static_cast<int>(part.op));
    return ncclInvalidArgument;
  }
  if (part.kind == Kind::kBroadcast && (part.root < 0 || part.root >= comm->clique->nranks())) {
    return ncclInvalidArgument;
  }
  if (part.count == 0) return ncclSuccess;
  stream_of(stream).enqueue(
      [clique = comm->clique, rank = comm->rank, part] { clique->run(rank, part); });
  return ncclSuccess;
}

}  // namespace zero::emu::nccl

inline ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                  cudaStream_t stream) {
  namespace en = zero::emu::nccl;
  return en::enqueue({en::Kind::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0}, comm,
                     stream);
}

inline ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream) {
  namespace en = zero::emu::nccl;
  return en::enqueue({en::Kind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0},
                     comm, stream);
}

inline ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                  ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  namespace en = zero::emu::nccl;
  return en::enqueue({en::Kind::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0},
                     comm, stream);
}

inline ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream) {
  namespace en = zero::emu::nccl;
  return en::enqueue({en::Kind::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root},
                     comm, stream);
}
