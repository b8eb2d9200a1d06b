// Streams and events: the ordering model every backend shares (issue 10, docs/design.md §8).
//
// A Stream runs the work queued on it in order, asynchronously to the host. An Event marks a point
// in one stream's work: record(e) on stream A, then wait(e) on stream B makes B's later work wait
// until A has run everything queued before the record — without the host waiting. The host waits
// only where it calls synchronize() (on a stream or an event); every such call site in the engine
// carries a why-comment.
//
// Semantics follow CUDA's (cudaEventRecord / cudaStreamWaitEvent): a wait or a host synchronize
// captures the event's most recent record at the time of the call; an event never recorded is
// complete. Backends: CpuStream (a worker thread per stream, device/cpu_stream.h) now, CUDA streams
// next.
//
// Errors: work that fails makes the stream's next synchronize() return the first failure (as CUDA's
// sticky errors); later work on that stream is skipped.
//
// Thread safety: queueing on one stream from several host threads is safe, but the order is then
// the order the calls arrived; in practice one host thread queues on each stream.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace zero::device {

class Stream;

// A point in a stream's queued work. Created by a Backend; shared by the streams of that backend.
class Event {
 public:
  virtual ~Event() = default;
  // True when the most recent record has completed (or there was none). Never blocks.
  virtual bool query() const = 0;
  // Host wait for the most recent record at the time of the call.
  virtual void synchronize() const = 0;
};

class Stream {
 public:
  virtual ~Stream() = default;
  virtual Device device() const = 0;
  // "compute", "comm", ... (diagnostics and traces).
  virtual const std::string& name() const = 0;

  // Marks `event` at the current end of this stream's queue.
  virtual void record(Event& event) = 0;
  // Later work on this stream waits for `event`'s most recent record (captured now).
  virtual void wait(const Event& event) = 0;
  // Host wait until everything queued so far has run. Returns the first error of that work since
  // the last synchronize(), and clears it.
  virtual Status synchronize() = 0;
};

}  // namespace zero::device
