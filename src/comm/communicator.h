// Communicator: the collectives ZeRO needs (all-reduce, reduce-scatter, all-gather, broadcast,
// barrier) over one data-parallel group, with per-kind byte accounting (DESIGN.md §4 wire volumes).
// Backends: MpiCommunicator (CPU, a communication thread) and NcclCommunicator (GPU, a stream).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "comm/comm_handle.h"
#include "core/dtype.h"
#include "core/status.h"

namespace zero {

enum class CommKind : uint8_t { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kBarrier };
inline constexpr int kNumCommKinds = 5;
// "all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier".
std::string_view comm_kind_name(CommKind kind);

enum class ReduceOp : uint8_t { kSum, kMax };

// One collective as a rank issues it: what every backend (MPI, shared memory, threads) receives.
struct CollectiveCall {
  CommKind kind = CommKind::kBarrier;
  ReduceOp reduce_op = ReduceOp::kSum;
  DType dtype = DType::kF32;
  const void* in = nullptr;
  void* out = nullptr;
  size_t numel = 0;  // all_reduce / broadcast: buffer numel; reduce_scatter / all_gather: block
  int root = 0;
};

// Calls and bytes of one collective kind.
struct CommKindStats {
  int64_t calls = 0;
  int64_t bytes = 0;
};

// A snapshot of the counters. Bytes are the payload one rank hands to / receives from the
// collective, in the caller's dtype (not what the transport puts on the wire):
//   all_reduce     numel × dtype_bytes               (the buffer)
//   reduce_scatter world_size × block_numel × bytes  (the input buffer)
//   all_gather     world_size × block_numel × bytes  (the output buffer)
//   broadcast      numel × dtype_bytes               (the buffer; counted on the root too)
//   barrier        0
// With Ψ = parameter bytes, a ZeRO stage 1/2 step therefore counts Ψ of reduce_scatter and Ψ of
// all_gather, and stage 0 counts Ψ of all_reduce (which the DESIGN §4 "2Ψ" wire figure doubles).
struct CommStats {
  std::array<CommKindStats, kNumCommKinds> per_kind{};

  const CommKindStats& operator[](CommKind kind) const {
    return per_kind[static_cast<size_t>(kind)];
  }
  int64_t total_bytes() const;
  int64_t total_calls() const;
  // One line: "all_reduce 3 calls 120 B, reduce_scatter ...".
  std::string to_string() const;
};

// The collectives of one group of `world_size` ranks.
//
// Ordering contract: every rank must issue the same collectives, in the same order, with the same
// sizes, dtypes and roots (as with MPI/NCCL). Asynchronous collectives of one communicator complete
// in issue order (one FIFO), so it is fine to issue collective k+1 before waiting for k.
//
// Buffers: host pointers for MpiCommunicator, device pointers for NcclCommunicator. They must stay
// valid and must not be written (inputs) or read (outputs) until the handle's wait() returned.
//
// Thread safety: issuing collectives is thread-safe, but the issue order is then the order the
// calls reached the communicator, which must still match on every rank; in practice one thread
// issues.
class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Rank among the processes on this host, and their number.
  virtual int local_rank() const = 0;
  virtual int local_world_size() const = 0;
  // "mpi" / "nccl".
  virtual std::string_view backend_name() const = 0;

  // --- Asynchronous forms: enqueue and return at once. ---

  // buf[0, numel) ← op over ranks of buf. 16-bit sums are computed in fp32 and rounded once (MPI).
  virtual CommHandle all_reduce_async(void* buf, size_t numel, DType dtype, ReduceOp op) = 0;
  // Sum reduce-scatter of equal blocks: out[0, block_numel) ← Σ_ranks in[rank·block_numel, +block).
  // REQUIRES: `in` holds world_size × block_numel elements; `in` and `out` do not overlap.
  virtual CommHandle reduce_scatter_async(const void* in, void* out, size_t block_numel,
                                          DType dtype) = 0;
  // out[r·block_numel, +block) ← rank r's in[0, block_numel). `in` may alias out's own block
  // (in-place gather). REQUIRES: `out` holds world_size × block_numel elements.
  virtual CommHandle all_gather_async(const void* in, void* out, size_t block_numel,
                                      DType dtype) = 0;
  // buf[0, numel) ← root's buf. Bytes are moved verbatim (dtype only sets the element size).
  virtual CommHandle broadcast_async(void* buf, size_t numel, DType dtype, int root) = 0;
  // Completes once every rank issued it.
  virtual CommHandle barrier_async() = 0;

  // Ends the whole job now with `exit_code`: this process and every other rank of the group
  // (MPI_Abort; NCCL aborts its communicator first), after flushing stdout and stderr. For a rank
  // that fails alone while its peers are in, or heading for, a collective: without it they would
  // wait there until the collective timeout. A world of one just exits. Never returns.
  [[noreturn]] virtual void abort_job(int exit_code) = 0;

  // --- Synchronous forms: the asynchronous call, then wait(). ---
  Status all_reduce(void* buf, size_t numel, DType dtype, ReduceOp op = ReduceOp::kSum) {
    return all_reduce_async(buf, numel, dtype, op).wait();
  }
  Status reduce_scatter(const void* in, void* out, size_t block_numel, DType dtype) {
    return reduce_scatter_async(in, out, block_numel, dtype).wait();
  }
  Status all_gather(const void* in, void* out, size_t block_numel, DType dtype) {
    return all_gather_async(in, out, block_numel, dtype).wait();
  }
  Status broadcast(void* buf, size_t numel, DType dtype, int root) {
    return broadcast_async(buf, numel, dtype, root).wait();
  }
  Status barrier() { return barrier_async().wait(); }

  // Counters of every collective issued since construction or the last reset (counted at issue
  // time, so they are exact as soon as the issuing call returned). Thread-safe.
  CommStats stats() const;
  void reset_stats();
  // Counts a collective that a world of one skips because it would move nothing (the caller's
  // input already is the result: a gather's own shard is the whole unit, a reduction's own
  // gradient is the sum), with the bytes the collective would have counted, so the counters
  // describe the same algorithm at every world size. REQUIRES: world_size() == 1.
  void record_elided(CommKind kind, size_t numel_or_block, DType dtype);

 protected:
  Communicator() = default;
  // Backends call this once per issued collective, with the byte definition of CommStats.
  void record(CommKind kind, int64_t bytes);

 private:
  struct Counter {
    std::atomic<int64_t> calls{0};
    std::atomic<int64_t> bytes{0};
  };
  std::array<Counter, kNumCommKinds> counters_;
};

// Bytes CommStats counts for one collective (see CommStats).
int64_t comm_payload_bytes(CommKind kind, size_t numel_or_block, DType dtype, int world_size);

// Compute threads per rank so that ranks sharing a host do not oversubscribe it: OMP_NUM_THREADS
// when set to a positive integer, else max(1, hardware threads / local_world_size).
int default_compute_threads(const Communicator& comm);
// The pure rule behind it (testable): `omp_num_threads_env` may be null.
int compute_threads_for(int hardware_threads, int local_world_size,
                        const char* omp_num_threads_env);

}  // namespace zero
