// ShmCollectives: segment set-up (POSIX shared memory) and the chunked collectives as a
// non-blocking state machine.
#include "comm/shm_collectives.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "comm/reduce16.h"
#include "core/check.h"

namespace zero {
namespace {

constexpr size_t kCacheLine = 64;
constexpr size_t kHeaderBytes = 4096;  // room for 64 ranks' counters, one cache line each
constexpr int kMaxRanks = static_cast<int>(kHeaderBytes / kCacheLine);

// [offset, offset + length) of chunk `c` when `total` units go `per_chunk` at a time.
struct Span {
  size_t offset;
  size_t length;
};
Span chunk_span(size_t c, size_t total, size_t per_chunk) {
  const size_t offset = c * per_chunk;
  return {offset, std::min(per_chunk, total - offset)};
}

// Units (elements or bytes) of the request that one chunk carries, and the request's total.
size_t per_chunk_units(const CollectiveCall& r, int world_size) {
  switch (r.kind) {
    case CommKind::kAllReduce:
      return ShmCollectives::kSlotBytes / sizeof(float);  // elements, fp32 in the slot
    case CommKind::kReduceScatter:
      return ShmCollectives::kSlotBytes / sizeof(float) / world_size;  // elements of each block
    case CommKind::kAllGather: return ShmCollectives::kSlotBytes;      // bytes of the block
    case CommKind::kBroadcast:
      return ShmCollectives::kSlotBytes * world_size;  // bytes: the root fills the whole half
    case CommKind::kBarrier: return 1;
  }
  return 1;
}
size_t total_units(const CollectiveCall& r) {
  switch (r.kind) {
    case CommKind::kAllReduce:
    case CommKind::kReduceScatter: return r.numel;
    case CommKind::kAllGather:
    case CommKind::kBroadcast: return r.numel * dtype_bytes(r.dtype);
    case CommKind::kBarrier: return 1;
  }
  return 1;
}

// out[i] = a[i] + b[i], bitwise the scalar fp32 adds (lane-wise, no reassociation); `out` may be
// `a` or `b`. Four lanes (the baseline ISA's register width: wider ones spill) by hand, twice per
// iteration: -O2 does not vectorise a loop that needs an aliasing check, and the scalar loop was
// 3% of a stage-3 rank's cycles.
void add_f32(const float* a, const float* b, float* out, size_t numel) {
  using F32x4 = float __attribute__((vector_size(16)));
  size_t i = 0;
  for (; i + 8 <= numel; i += 8) {
    F32x4 a0, a1, b0, b1;
    std::memcpy(&a0, a + i, sizeof(a0));
    std::memcpy(&a1, a + i + 4, sizeof(a1));
    std::memcpy(&b0, b + i, sizeof(b0));
    std::memcpy(&b1, b + i + 4, sizeof(b1));
    const F32x4 s0 = a0 + b0, s1 = a1 + b1;
    std::memcpy(out + i, &s0, sizeof(s0));
    std::memcpy(out + i + 4, &s1, sizeof(s1));
  }
  for (; i < numel; ++i) out[i] = a[i] + b[i];
}

}  // namespace

StatusOr<std::unique_ptr<ShmCollectives>> ShmCollectives::create(MPI_Comm comm) {
  int rank = 0;
  int world_size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &world_size);
  if (world_size > kMaxRanks) {
    return failed_precondition("shared-memory collectives support at most {} ranks, not {}",
                               kMaxRanks, world_size);
  }
  const size_t segment_bytes = kHeaderBytes + 2 * static_cast<size_t>(world_size) * kSlotBytes;
  // Rank 0 names the object (pid + address: unique on this host) and sizes it.
  char name[64] = {};
  std::string error;
  if (rank == 0) {
    static std::atomic<int> serial{0};
    std::snprintf(name, sizeof(name), "/zero-coll-%d-%d", static_cast<int>(getpid()),
                  serial.fetch_add(1));
    const int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      error = fmt::format("shm_open({}): {}", name, std::strerror(errno));
    } else {
      // posix_fallocate, not ftruncate alone: a full /dev/shm is an error here, not a SIGBUS later.
      const int rc = posix_fallocate(fd, 0, static_cast<off_t>(segment_bytes));
      if (rc != 0) {
        error = fmt::format("reserving {} B of /dev/shm for {}: {}", segment_bytes, name,
                            std::strerror(rc));
      }
      close(fd);
    }
    if (!error.empty()) name[0] = '\0';
  }
  MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, comm);
  void* base = MAP_FAILED;
  if (name[0] != '\0') {
    const int fd = shm_open(name, O_RDWR, 0600);
    if (fd >= 0) {
      base = mmap(nullptr, segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      close(fd);
    }
    if (base == MAP_FAILED) error = fmt::format("mapping {}: {}", name, std::strerror(errno));
  }
  int mapped = base != MAP_FAILED ? 1 : 0;
  int all_mapped = 0;
  // Why allreduce: rank 0 may unlink only once every rank mapped, and all must agree on the path.
  MPI_Allreduce(&mapped, &all_mapped, 1, MPI_INT, MPI_MIN, comm);
  if (rank == 0 && name[0] != '\0') shm_unlink(name);
  if (!all_mapped) {
    if (base != MAP_FAILED) munmap(base, segment_bytes);
    if (error.empty()) error = "another rank could not map the segment";
    return internal_error("rank {}: shared-memory collectives unavailable: {}", rank, error);
  }
  return std::unique_ptr<ShmCollectives>(new ShmCollectives(rank, world_size, base, segment_bytes));
}

ShmCollectives::ShmCollectives(int rank, int world_size, void* base, size_t segment_bytes)
    : rank_(rank),
      world_size_(world_size),
      base_(base),
      segment_bytes_(segment_bytes),
      data_(static_cast<char*>(base) + kHeaderBytes) {}

ShmCollectives::~ShmCollectives() { munmap(base_, segment_bytes_); }

uint64_t* ShmCollectives::counter(int r) const {
  return reinterpret_cast<uint64_t*>(static_cast<char*>(base_) + r * kCacheLine);
}

char* ShmCollectives::slot_bytes(int r) const {
  const size_t half = half_ % 2;
  return data_ + (half * world_size_ + r) * kSlotBytes;
}

float* ShmCollectives::slot_f32(int r) const { return reinterpret_cast<float*>(slot_bytes(r)); }

void ShmCollectives::arrive() {
  ++arrived_;
  // Release: this rank's stores into the slots are visible to a peer that sees the new count.
  std::atomic_ref<uint64_t>(*counter(rank_)).store(arrived_, std::memory_order_release);
}

bool ShmCollectives::all_arrived() const {
  for (int r = 0; r < world_size_; ++r) {
    if (std::atomic_ref<uint64_t>(*counter(r)).load(std::memory_order_acquire) < arrived_) {
      return false;
    }
  }
  return true;
}

size_t ShmCollectives::chunk_count() const {
  const size_t per = per_chunk_units(request_, world_size_);
  return (total_units(request_) + per - 1) / per;
}

void ShmCollectives::start(const CollectiveCall& request) {
  ZERO_CHECK(phase_ == Phase::kDone, "shm collective started before the previous one finished");
  ZERO_CHECK(request.kind == CommKind::kBarrier || request.numel > 0, "empty shm collective");
  request_ = request;
  chunk_ = 0;
  phase_ = Phase::kCopyIn;
}

bool ShmCollectives::test() {
  for (;;) {
    switch (phase_) {
      case Phase::kCopyIn:
        copy_in();
        arrive();
        phase_ = Phase::kWaitFirst;
        break;
      case Phase::kWaitFirst:
        if (!all_arrived()) return false;
        ++barriers_passed_;
        after_first_barrier();
        break;
      case Phase::kWaitSecond:
        if (!all_arrived()) return false;
        ++barriers_passed_;
        after_second_barrier();
        break;
      case Phase::kDone: return true;
    }
  }
}

void ShmCollectives::next_chunk() {
  ++half_;
  ++chunk_;
  phase_ = chunk_ < chunk_count() ? Phase::kCopyIn : Phase::kDone;
}

// Chunk c of each kind (units per chunk: per_chunk_units) goes in as:
// - all_reduce: own elements [off, +len) -> own slot (fp32);
// - reduce_scatter: for each block d, own elements d * block + [off, +len) -> own slot
//   [d * len, +len) (fp32); fp32 data skips its own block d = rank (the rank reduces it from its
//   input where it is: only blocks a peer reads cross the segment);
// - all_gather: own block's bytes [off, +len) -> own slot, and (unless in place) into the own
//   block of the output, before the barrier rather than after it;
// - broadcast: the root's bytes [off, +len) -> the half (from slot 0 on).
void ShmCollectives::copy_in() {
  const CollectiveCall& r = request_;
  if (r.kind == CommKind::kBarrier) return;
  const size_t elem = dtype_bytes(r.dtype);
  const Span s = chunk_span(chunk_, total_units(r), per_chunk_units(r, world_size_));
  const char* in = static_cast<const char*>(r.in);
  switch (r.kind) {
    case CommKind::kAllReduce:
      convert_to_f32(in + s.offset * elem, r.dtype, slot_f32(rank_), s.length);
      break;
    case CommKind::kReduceScatter:
      for (int d = 0; d < world_size_; ++d) {
        if (d == rank_ && r.dtype == DType::kF32) continue;
        convert_to_f32(in + (d * r.numel + s.offset) * elem, r.dtype,
                       slot_f32(rank_) + d * s.length, s.length);
      }
      break;
    case CommKind::kAllGather: {
      std::memcpy(slot_bytes(rank_), in + s.offset, s.length);
      char* own = static_cast<char*>(r.out) + rank_ * r.numel * elem + s.offset;
      if (own != in + s.offset) std::memcpy(own, in + s.offset, s.length);  // in place: there
      break;
    }
    case CommKind::kBroadcast:
      if (rank_ == r.root)
        std::memcpy(slot_bytes(0), static_cast<char*>(r.out) + s.offset, s.length);
      break;
    case CommKind::kBarrier: break;
  }
}

void ShmCollectives::after_first_barrier() {
  const CollectiveCall& r = request_;
  if (r.kind == CommKind::kBarrier) {
    phase_ = Phase::kDone;
    return;
  }
  const size_t elem = dtype_bytes(r.dtype);
  const Span s = chunk_span(chunk_, total_units(r), per_chunk_units(r, world_size_));
  char* out = static_cast<char*>(r.out);
  switch (r.kind) {
    case CommKind::kAllReduce: {
      // This rank's slice of the chunk, summed in rank order into slot 0 (only this rank writes
      // there), as reduce_reference does: acc = x0, acc op= x1, ...
      const size_t lo = s.length * rank_ / world_size_;
      const size_t hi = s.length * (rank_ + 1) / world_size_;
      float* acc = slot_f32(0) + lo;
      for (int q = 1; q < world_size_; ++q) {
        if (r.reduce_op == ReduceOp::kSum) {
          add_f32(acc, slot_f32(q) + lo, acc, hi - lo);
        } else {
          accumulate_f32(slot_f32(q) + lo, acc, hi - lo, r.reduce_op);
        }
      }
      arrive();  // every slice of slot 0 must be reduced before anyone copies it out
      phase_ = Phase::kWaitSecond;
      return;
    }
    case CommKind::kReduceScatter: {
      // Block rank_ of rank q's data: in q's slot, except this rank's own fp32 block, read from
      // its input (copy_in left it out).
      auto block = [&](int q) -> const float* {
        if (q == rank_ && r.dtype == DType::kF32) {
          return reinterpret_cast<const float*>(r.in) + rank_ * r.numel + s.offset;
        }
        return slot_f32(q) + rank_ * s.length;
      };
      // fp32 sums straight into the output; 16-bit ones in fp32, rounded once below.
      float* acc = reinterpret_cast<float*>(out) + s.offset;
      if (r.dtype != DType::kF32) {
        scratch_f32_.resize(s.length);
        acc = scratch_f32_.data();
      }
      if (world_size_ == 1) {
        if (acc != block(0)) std::memcpy(acc, block(0), s.length * sizeof(float));
      } else {
        add_f32(block(0), block(1), acc, s.length);
      }
      for (int q = 2; q < world_size_; ++q) add_f32(acc, block(q), acc, s.length);
      if (r.dtype != DType::kF32) convert_from_f32(acc, out + s.offset * elem, r.dtype, s.length);
      break;
    }
    case CommKind::kAllGather: {
      const size_t block_bytes = r.numel * elem;
      for (int q = 0; q < world_size_; ++q) {
        if (q != rank_) std::memcpy(out + q * block_bytes + s.offset, slot_bytes(q), s.length);
      }
      break;
    }
    case CommKind::kBroadcast:
      if (rank_ != r.root) std::memcpy(out + s.offset, slot_bytes(0), s.length);
      break;
    case CommKind::kBarrier: break;
  }
  next_chunk();
}

void ShmCollectives::after_second_barrier() {
  // Only all_reduce has a second barrier: copy the reduced chunk out of slot 0.
  const CollectiveCall& r = request_;
  const size_t elem = dtype_bytes(r.dtype);
  const Span s = chunk_span(chunk_, total_units(r), per_chunk_units(r, world_size_));
  convert_from_f32(slot_f32(0), static_cast<char*>(r.out) + s.offset * elem, r.dtype, s.length);
  next_chunk();
}

}  // namespace zero
