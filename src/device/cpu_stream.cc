// CpuStream and CpuEvent (cpu_stream.h).
#include "device/cpu_stream.h"

#include <chrono>
#include <cstdlib>
#include <utility>

namespace zero::device {

int64_t delay_us_from_env() {
  const char* env = std::getenv("ZERO_STREAM_DELAY_US");
  if (env == nullptr || *env == '\0') return 0;
  char* end = nullptr;
  const long long v = std::strtoll(env, &end, 10);
  return end != nullptr && *end == '\0' && v > 0 ? v : 0;
}

// --- CpuEvent ---

bool CpuEvent::query() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->completed_gen >= state_->recorded_gen;
}

void CpuEvent::synchronize() const { state_->wait_for(state_->recorded()); }

uint64_t CpuEvent::State::next_record() {
  std::lock_guard<std::mutex> lock(mu);
  return ++recorded_gen;
}

void CpuEvent::State::complete(uint64_t generation) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (generation > completed_gen) completed_gen = generation;
  }
  cv.notify_all();
}

uint64_t CpuEvent::State::recorded() const {
  std::lock_guard<std::mutex> lock(mu);
  return recorded_gen;
}

void CpuEvent::State::wait_for(uint64_t generation) const {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return completed_gen >= generation; });
}

// --- CpuStream ---

CpuStream::CpuStream(std::string name, StreamOptions options)
    : name_(std::move(name)),
      inline_(options.inline_host),
      max_delay_us_(options.max_delay_us > 0 ? options.max_delay_us : delay_us_from_env()),
      delay_rng_(options.delay_seed) {
  if (!inline_) worker_ = std::thread([this] { worker_main(); });
}

CpuStream::~CpuStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void CpuStream::enqueue(std::function<Status()> op) { push(Op{std::move(op), false}); }

void CpuStream::enqueue_always(std::function<void()> op) {
  push(Op{[op = std::move(op)] {
            op();
            return ok_status();
          },
          true});
}

void CpuStream::push(Op op) {
  if (inline_) {  // the caller is the stream: run it now
    run_op(op.fn, op.ordering_only, /*count_queued=*/true);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(op));
    ++queued_;
  }
  cv_.notify_all();
}

void CpuStream::record(Event& event) {
  // REQUIRES: a CpuEvent (events and streams come from the same backend).
  std::shared_ptr<CpuEvent::State> e = static_cast<CpuEvent&>(event).state();
  const uint64_t generation = e->next_record();
  push(Op{[e = std::move(e), generation] {
            e->complete(generation);
            return ok_status();
          },
          true});
}

void CpuStream::wait(const Event& event) {
  std::shared_ptr<CpuEvent::State> e = static_cast<const CpuEvent&>(event).state();
  const uint64_t generation = e->recorded();  // captured now, as cudaStreamWaitEvent does
  if (generation == 0) return;
  push(Op{[e = std::move(e), generation] {
            e->wait_for(generation);
            return ok_status();
          },
          true});
}

Status CpuStream::synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = queued_;
  cv_.wait(lock, [&] { return done_ >= target; });
  return std::exchange(first_error_, ok_status());
}

void CpuStream::worker_main() {
  std::uniform_int_distribution<int64_t> delay(0, max_delay_us_);
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    if (max_delay_us_ > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(delay(delay_rng_)));
    }
    run_op(op.fn, op.ordering_only, /*count_queued=*/false);
    cv_.notify_all();
  }
}

}  // namespace zero::device
