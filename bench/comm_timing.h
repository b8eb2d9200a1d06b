// Timing a collective across ranks, for the communication benchmarks (comm_collectives_bench,
// comm_sweep_bench).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "core/check.h"

namespace zero::bench {

// Median wall ms of `iterations` calls of `fn` (after one warm-up call), the max over ranks.
inline double median_ms(Communicator& comm, int iterations, const std::function<void()>& fn) {
  using Clock = std::chrono::steady_clock;
  fn();
  std::vector<float> ms;
  for (int i = 0; i < iterations; ++i) {
    // Why barrier: every rank starts the timed call together, so the time is the collective's.
    ZERO_CHECK(comm.barrier().ok());
    const auto start = Clock::now();
    fn();
    ms.push_back(std::chrono::duration<float, std::milli>(Clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  float med = ms[ms.size() / 2];
  ZERO_CHECK(comm.all_reduce(&med, 1, DType::kF32, ReduceOp::kMax).ok());
  return med;
}

}  // namespace zero::bench
