// ShmCollectives: MpiCommunicator's fast path when every rank is on one host. The collectives run
// by loads and stores through one shared-memory segment (copy in, barrier, each rank reduces its
// slice in rank order, barrier, copy out) instead of Open MPI's non-blocking collectives, which
// move each byte several times. Results are bitwise those of reduce_reference (reduce16.h).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/dtype.h"
#include "core/status.h"

namespace zero {

// Segment: a header of one arrival counter per rank (a cache line each), then two halves of
// world_size slots of kSlotBytes. Consecutive chunks alternate halves, so a rank may fill the next
// chunk's slots while slower ranks still read the previous chunk's; a message larger than a half
// runs as several chunks. Reductions hold fp32 in the slots (16-bit data is widened on the way in
// and rounded once on the way out).
//
// Barrier: each rank bumps its own counter (release) and waits until every counter reached the same
// value (acquire). Waiting is the caller's: test() never blocks, it returns false at a barrier that
// is not complete, and the caller backs off (sleeps) and calls it again until its deadline.
//
// Threading: one thread at a time (MpiCommunicator's communication thread). Not movable.
class ShmCollectives {
 public:
  static constexpr size_t kSlotBytes = size_t{4} << 20;

  // Collective over `comm` (every rank of it must be on this host): rank 0 creates a POSIX
  // shared-memory object, every rank maps it, then rank 0 unlinks its name (nothing is left in
  // /dev/shm even after a crash). Fails on every rank if any rank could not map it. Unmapping is
  // local (the destructor never waits for a peer, unlike MPI_Win_free).
  static StatusOr<std::unique_ptr<ShmCollectives>> create(MPI_Comm comm);
  ~ShmCollectives();
  ShmCollectives(const ShmCollectives&) = delete;
  ShmCollectives& operator=(const ShmCollectives&) = delete;

  // Starts `request`. REQUIRES: the previous request finished (test() returned true); every rank
  // starts the same requests in the same order; numel > 0 unless kind is kBarrier.
  void start(const CollectiveCall& request);
  // Advances the started request as far as it can without waiting for a peer; true once it
  // finished (this rank's output is written). Never blocks.
  bool test();
  // Number of barriers this rank has passed: grows whenever test() made progress past a peer.
  uint64_t barriers_passed() const { return barriers_passed_; }

 private:
  enum class Phase : uint8_t { kCopyIn, kWaitFirst, kWaitSecond, kDone };

  ShmCollectives(int rank, int world_size, void* base, size_t segment_bytes);

  size_t chunk_count() const;  // of the current request
  void copy_in();              // phase kCopyIn of chunk chunk_
  void after_first_barrier();  // returns with phase_ set to kWaitSecond or past the chunk
  void after_second_barrier();
  void next_chunk();
  void arrive();
  bool all_arrived() const;
  float* slot_f32(int r) const;  // slot of rank r in the current chunk's half
  char* slot_bytes(int r) const;
  uint64_t* counter(int r) const;

  int rank_;
  int world_size_;
  void* base_;
  size_t segment_bytes_;
  char* data_;  // base_ + header

  CollectiveCall request_;
  size_t chunk_ = 0;
  Phase phase_ = Phase::kDone;
  uint64_t half_ = 0;     // chunks started on this segment (the half is half_ % 2)
  uint64_t arrived_ = 0;  // this rank's arrival count (its counter's value)
  uint64_t barriers_passed_ = 0;
  std::vector<float> scratch_f32_;  // reduce_scatter of 16-bit data: the fp32 sum of a chunk
};

}  // namespace zero
