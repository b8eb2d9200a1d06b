// The emulator's streams and events (docs/emu.md, "Streams"): each stream is an in-order queue of
// device operations served by its own host thread, so work on two streams runs in whatever order
// the threads take unless the program orders it, as on a GPU. The legacy default stream follows
// CUDA's rules: it waits for every blocking stream and they wait for it; non-blocking streams
// (cudaStreamNonBlocking) never synchronise with it. ZERO_EMU_STREAM_DELAY_US=<max> sleeps a
// random 0..max microseconds before each operation, so a missing wait shows as a wrong result.
// Devices (kNumDevices, cudaSetDevice per host thread) only label streams: each has its own legacy
// stream, and the legacy stream's implicit waits and cudaDeviceSynchronize stay within a device, so
// ranks on threads of one process (the NCCL stand-in, shadow/nccl.h) do not synchronise with each
// other through them. Memory is one host heap for all.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

namespace zero::emu {

class Stream;

// The emulated devices (as on an 8-GPU node) and the calling host thread's current one.
inline constexpr int kNumDevices = 8;
inline thread_local int t_current_device = 0;

// A point in a stream's work: reached once the stream has completed its `seq`-th operation (and
// with it, in order, all before). seq 0 is reached from the start.
struct StreamPoint {
  std::shared_ptr<Stream> stream;
  uint64_t seq = 0;
};

// The device's one lock: it guards every stream's queue and counters and every event; `changed`
// is announced on each enqueue, completion and retirement (a handful of threads wait on it).
struct DeviceState {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Stream*> live_streams;  // those whose worker runs (the legacy stream included)
};

inline DeviceState& device_state() {
  static DeviceState* state = new DeviceState;  // never destroyed: detached workers use it
  return *state;
}

// ZERO_EMU_STREAM_DELAY_US: the most a worker sleeps before an operation (0: no delay).
inline int64_t stream_delay_max_us() {
  static const int64_t max_us = [] {
    const char* text = std::getenv("ZERO_EMU_STREAM_DELAY_US");
    if (text == nullptr || *text == '\0') return int64_t{0};
    char* end = nullptr;
    const long long value = std::strtoll(text, &end, 10);
    if (*end != '\0' || value < 0 || value > 1000000) {
      std::fprintf(stderr,
                   "zero emu: ZERO_EMU_STREAM_DELAY_US=%s: want microseconds in [0, 1000000]\n",
                   text);
      std::exit(2);
    }
    return int64_t{value};
  }();
  return max_us;
}

inline void sleep_random_stream_delay() {
  const int64_t max_us = stream_delay_max_us();
  if (max_us == 0) return;
  thread_local std::minstd_rand rng(std::random_device{}());
  const int64_t us = std::uniform_int_distribution<int64_t>(0, max_us)(rng);
  std::this_thread::sleep_for(std::chrono::microseconds(us));
}

// One stream: its worker thread runs the queued operations one at a time, in order, each once
// its waits (explicit and the legacy stream's implicit ones) are reached.
// Thread safety: every member is guarded by device_state().mutex.
class Stream : public std::enable_shared_from_this<Stream> {
 public:
  enum class Kind { kLegacy, kBlocking, kNonBlocking };

  // A new stream of `device` with its worker started; the worker keeps it alive until retire()
  // and drained.
  static std::shared_ptr<Stream> start(Kind kind, int device = t_current_device) {
    auto stream = std::shared_ptr<Stream>(new Stream(kind, device));
    DeviceState& dev = device_state();
    {
      const std::lock_guard<std::mutex> lock(dev.mutex);
      dev.live_streams.push_back(stream.get());
    }
    std::thread([stream] { stream->serve(); }).detach();  // exits once retired and drained
    return stream;
  }

  // The legacy default stream (stream 0, cudaStreamLegacy) of `device`, started on first use:
  // lives as long as the process.
  static Stream& legacy(int device = t_current_device) {
    static std::mutex mutex;
    static std::array<Stream*, kNumDevices> streams{};  // their workers hold the references
    const std::lock_guard<std::mutex> lock(mutex);
    Stream*& stream = streams[static_cast<size_t>(device)];
    if (stream == nullptr) stream = start(Kind::kLegacy, device).get();
    return *stream;
  }

  // Queues `work` behind every earlier operation of this stream and behind `waits`; returns the
  // point reached when it has run. On the legacy stream it also waits for all work queued so far
  // on blocking streams; on a blocking stream, for all work queued so far on the legacy stream
  // (of the same device).
  StreamPoint enqueue(std::function<void()> work, std::vector<StreamPoint> waits = {}) {
    DeviceState& dev = device_state();
    const std::lock_guard<std::mutex> lock(dev.mutex);
    for (Stream* other : dev.live_streams) {
      const bool implicit = (kind_ == Kind::kLegacy && other->kind_ == Kind::kBlocking) ||
                            (kind_ == Kind::kBlocking && other->kind_ == Kind::kLegacy);
      if (implicit && other->device_ == device_ && other->completed_ < other->enqueued_) {
        waits.push_back({other->shared_from_this(), other->enqueued_});
      }
    }
    queue_.push_back({std::move(work), std::move(waits)});
    const uint64_t seq = ++enqueued_;
    dev.changed.notify_all();
    return {shared_from_this(), seq};
  }

  // The point reached when everything queued so far has run.
  StreamPoint tail() {
    const std::lock_guard<std::mutex> lock(device_state().mutex);
    return {shared_from_this(), enqueued_};
  }

  // cudaStreamDestroy: the worker finishes the queue, then exits (the call does not wait).
  void retire() {
    DeviceState& dev = device_state();
    const std::lock_guard<std::mutex> lock(dev.mutex);
    retiring_ = true;
    dev.changed.notify_all();
  }

  Kind kind() const { return kind_; }
  int device() const { return device_; }

  // REQUIRES: device_state().mutex held.
  uint64_t enqueued_locked() const { return enqueued_; }

  // REQUIRES: device_state().mutex held.
  static bool reached(const StreamPoint& point) {
    return point.stream == nullptr || point.stream->completed_ >= point.seq;
  }

 private:
  struct Op {
    std::function<void()> work;
    std::vector<StreamPoint> waits;
  };

  Stream(Kind kind, int device) : kind_(kind), device_(device) {}

  void serve() {
    DeviceState& dev = device_state();
    std::unique_lock<std::mutex> lock(dev.mutex);
    for (;;) {
      dev.changed.wait(lock, [&] { return !queue_.empty() || retiring_; });
      if (queue_.empty()) break;  // retired and drained
      Op op = std::move(queue_.front());
      queue_.pop_front();
      // Why: an operation starts only after what it waits for has finished (the cross-stream
      // order the program asked for, with events or through the legacy stream).
      dev.changed.wait(lock, [&] {
        for (const StreamPoint& w : op.waits) {
          if (!reached(w)) return false;
        }
        return true;
      });
      lock.unlock();
      sleep_random_stream_delay();
      op.work();
      op = {};  // the captures (staging buffers, other streams) go outside the lock
      lock.lock();
      ++completed_;
      dev.changed.notify_all();
    }
    std::erase(dev.live_streams, this);
  }

  const Kind kind_;
  const int device_;
  std::deque<Op> queue_;
  uint64_t enqueued_ = 0;   // operations ever queued
  uint64_t completed_ = 0;  // operations that have run (a prefix of the queue)
  bool retiring_ = false;
};

// Blocks the calling host thread until every point has been reached.
inline void wait_until_reached(const std::vector<StreamPoint>& points) {
  DeviceState& dev = device_state();
  std::unique_lock<std::mutex> lock(dev.mutex);
  dev.changed.wait(lock, [&] {
    for (const StreamPoint& p : points) {
      if (!Stream::reached(p)) return false;
    }
    return true;
  });
}

// The points at which every stream of `device` has done its work queued so far
// (cudaDeviceSynchronize).
inline std::vector<StreamPoint> all_stream_tails(int device = t_current_device) {
  Stream::legacy(device);  // started, so the list is never empty of it
  DeviceState& dev = device_state();
  const std::lock_guard<std::mutex> lock(dev.mutex);
  std::vector<StreamPoint> tails;
  for (Stream* s : dev.live_streams) {
    if (s->device() == device) tails.push_back({s->shared_from_this(), s->enqueued_locked()});
  }
  return tails;
}

// An event: the stream point of its latest record (none: never recorded, so always complete).
struct Event {
  int device = t_current_device;  // the device current at cudaEventCreate
  bool timing = true;             // not created with cudaEventDisableTiming
  StreamPoint recorded;           // guarded by device_state().mutex
  // When the stream ran the most recent record (timing events): shared with the queued record, so
  // the event may be destroyed or recorded again while one is pending. Guarded by
  // device_state().mutex.
  std::shared_ptr<std::chrono::steady_clock::time_point> recorded_at;
};

}  // namespace zero::emu
