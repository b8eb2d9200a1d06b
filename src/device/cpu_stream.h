// The CPU backend's streams: each CpuStream is one worker thread running its queue in order, so
// the engine's stream and event logic runs (and is tested) on the CPU exactly as it will on a GPU.
//
// Delay mode (tests): every queued op first sleeps a random 0..max_delay_us, drawn from a seeded
// generator per stream, so a missing wait between streams shows up as a wrong result or a TSan
// report instead of passing by luck. Enabled by StreamOptions or, for whole test runs, by the
// environment variable ZERO_STREAM_DELAY_US=<max microseconds>.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "device/stream.h"

namespace zero::device {

struct StreamOptions {
  // CPU streams: each op sleeps uniform [0, max_delay_us] first; 0: no delays (unless
  // ZERO_STREAM_DELAY_US). The CUDA backend ignores both (its emulator: ZERO_EMU_STREAM_DELAY_US).
  int64_t max_delay_us = 0;
  uint64_t delay_seed = 1;
  // The CUDA backend's GPU (one per rank: the local rank); the CPU backend ignores it.
  int cuda_device = 0;
  // CPU streams: run each op at once on the thread that queues it, no worker thread (the host
  // engine's streams: the work is the caller's own, and a hand-off per op would only add latency).
  // Program order is then stream order; a wait blocks the caller until the event completes; delays
  // are not applied.
  bool inline_host = false;
};

// ZERO_STREAM_DELAY_US as a number (0 when unset or invalid).
int64_t delay_us_from_env();

class CpuEvent final : public Event {
 public:
  bool query() const override;
  void synchronize() const override;

  // Backend side (CpuStream): the record / completion counters, shared with the ops queued on
  // streams, so the event may be destroyed while they are pending (as a CUDA event may).
  struct State {
    // A new record's generation, and its completion.
    uint64_t next_record();
    void complete(uint64_t generation);
    // Generation of the most recent record (0: never recorded).
    uint64_t recorded() const;
    // Blocks until `generation` has completed.
    void wait_for(uint64_t generation) const;

    mutable std::mutex mu;
    mutable std::condition_variable cv;
    uint64_t recorded_gen = 0;   // guarded by mu
    uint64_t completed_gen = 0;  // guarded by mu; records complete in order on their stream
  };
  const std::shared_ptr<State>& state() const { return state_; }

 private:
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

class CpuStream final : public Stream {
 public:
  explicit CpuStream(std::string name, StreamOptions options = {});
  // Runs what is queued, then stops the worker.
  ~CpuStream() override;
  CpuStream(const CpuStream&) = delete;
  CpuStream& operator=(const CpuStream&) = delete;

  Device device() const override { return Device::kCpu; }
  const std::string& name() const override { return name_; }
  // StreamOptions::inline_host: each op runs on the thread that queues it.
  bool is_inline() const { return inline_; }
  void record(Event& event) override;
  void wait(const Event& event) override;
  Status synchronize() override;

  // Queues `op` (run on the worker thread, after everything queued before it). A failing op's
  // Status is kept for synchronize(); ops queued after a failure are skipped.
  void enqueue(std::function<Status()> op);
  // enqueue() without the std::function on an inline stream: `op` (a callable returning Status)
  // runs here and now, under the same sticky-error rule. The CPU backend's ops go through it.
  template <typename F>
  void submit(F&& op) {
    if (inline_) {
      run_op(op, /*ordering_only=*/false, /*count_queued=*/true);
    } else {
      enqueue(std::function<Status()>(std::forward<F>(op)));
    }
  }
  // Queues `op` to run even after a failed op (as event records and waits do): a collective, which
  // every rank must issue whatever its own stream's state.
  void enqueue_always(std::function<void()> op);

 private:
  struct Op {
    std::function<Status()> fn;
    bool ordering_only = false;  // event record / wait, enqueue_always: runs even after a failure
  };
  void push(Op op);
  // Runs `fn` on the calling thread (the worker, or the caller of an inline stream) under the
  // sticky-error rule: after a failure the stream's data is suspect and later ops are skipped
  // (CUDA's sticky errors), except event records and waits (`ordering_only`), which only order
  // work and must still complete. Counts it done (and queued too, for an inline stream's op).
  template <typename F>
  void run_op(F& fn, bool ordering_only, bool count_queued) {
    bool skip;
    {
      std::lock_guard<std::mutex> lock(mu_);
      skip = !first_error_.ok();
      if (count_queued) ++queued_;
    }
    Status s = skip && !ordering_only ? ok_status() : fn();
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.ok() && first_error_.ok()) first_error_ = std::move(s);
    ++done_;
  }
  void worker_main();

  const std::string name_;
  const bool inline_;  // StreamOptions::inline_host: no worker_, ops run in push()
  int64_t max_delay_us_;
  std::mt19937_64 delay_rng_;  // worker thread only

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;   // guarded by mu_
  uint64_t queued_ = 0;    // ops ever queued; guarded by mu_
  uint64_t done_ = 0;      // ops ever run or skipped; guarded by mu_
  Status first_error_;     // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  std::thread worker_;
};

}  // namespace zero::device
