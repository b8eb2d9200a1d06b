// Communicator byte accounting and the per-rank compute-thread rule.
#include "comm/communicator.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "core/check.h"

namespace zero {

std::string_view comm_kind_name(CommKind kind) {
  switch (kind) {
    case CommKind::kAllReduce: return "all_reduce";
    case CommKind::kReduceScatter: return "reduce_scatter";
    case CommKind::kAllGather: return "all_gather";
    case CommKind::kBroadcast: return "broadcast";
    case CommKind::kBarrier: return "barrier";
  }
  return "?";
}

int64_t CommStats::total_bytes() const {
  int64_t total = 0;
  for (const auto& s : per_kind) total += s.bytes;
  return total;
}

int64_t CommStats::total_calls() const {
  int64_t total = 0;
  for (const auto& s : per_kind) total += s.calls;
  return total;
}

std::string CommStats::to_string() const {
  std::string out;
  for (int k = 0; k < kNumCommKinds; ++k) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{} {} calls {} B", comm_kind_name(static_cast<CommKind>(k)),
                       per_kind[k].calls, per_kind[k].bytes);
  }
  return out;
}

CommStats Communicator::stats() const {
  CommStats s;
  for (int k = 0; k < kNumCommKinds; ++k) {
    s.per_kind[k].calls = counters_[k].calls.load(std::memory_order_relaxed);
    s.per_kind[k].bytes = counters_[k].bytes.load(std::memory_order_relaxed);
  }
  return s;
}

void Communicator::reset_stats() {
  for (auto& c : counters_) {
    c.calls.store(0, std::memory_order_relaxed);
    c.bytes.store(0, std::memory_order_relaxed);
  }
}

void Communicator::record(CommKind kind, int64_t bytes) {
  auto& c = counters_[static_cast<size_t>(kind)];
  c.calls.fetch_add(1, std::memory_order_relaxed);
  c.bytes.fetch_add(bytes, std::memory_order_relaxed);
}

void Communicator::record_elided(CommKind kind, size_t numel_or_block, DType dtype) {
  ZERO_CHECK(world_size() == 1, "record_elided on a world of ", world_size(), " ranks");
  record(kind, comm_payload_bytes(kind, numel_or_block, dtype, 1));
}

int64_t comm_payload_bytes(CommKind kind, size_t numel_or_block, DType dtype, int world_size) {
  const auto elem_bytes = static_cast<int64_t>(dtype_bytes(dtype));
  const auto numel = static_cast<int64_t>(numel_or_block);
  switch (kind) {
    case CommKind::kAllReduce:
    case CommKind::kBroadcast: return numel * elem_bytes;
    case CommKind::kReduceScatter:
    case CommKind::kAllGather: return static_cast<int64_t>(world_size) * numel * elem_bytes;
    case CommKind::kBarrier: return 0;
  }
  return 0;
}

int compute_threads_for(int hardware_threads, int local_world_size,
                        const char* omp_num_threads_env) {
  if (omp_num_threads_env != nullptr && *omp_num_threads_env != '\0') {
    char* end = nullptr;
    long n = std::strtol(omp_num_threads_env, &end, 10);
    // OMP_NUM_THREADS may be a list ("4,2" for nested levels): the first level is ours.
    if (end != omp_num_threads_env && (*end == '\0' || *end == ',') && n > 0) {
      return static_cast<int>(n);
    }
  }
  if (hardware_threads < 1) hardware_threads = 1;
  if (local_world_size < 1) local_world_size = 1;
  return std::max(1, hardware_threads / local_world_size);
}

int default_compute_threads(const Communicator& comm) {
  return compute_threads_for(static_cast<int>(std::thread::hardware_concurrency()),
                             comm.local_world_size(), std::getenv("OMP_NUM_THREADS"));
}

}  // namespace zero
