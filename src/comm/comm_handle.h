// CommHandle: the completion of one asynchronous collective. The backend decides what "done" means
// (the CPU communication thread finished it; a CUDA event recorded after the NCCL call fired).
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>

#include "core/status.h"

namespace zero {

// What a backend implements for one in-flight collective.
class CommCompletion {
 public:
  virtual ~CommCompletion() = default;
  // Blocks until the collective finished; returns its result. Idempotent. Thread-safe.
  virtual Status wait() = 0;
  // Non-blocking: true once wait() would return immediately. Thread-safe.
  virtual bool done() = 0;
};

// Completion fulfilled by another thread (the CPU communication thread).
class PromiseCompletion final : public CommCompletion {
 public:
  // Records the result and wakes waiters. REQUIRES: called at most once.
  void fulfil(Status status);
  Status wait() override;
  bool done() override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Status> result_;
};

// A value handle to one asynchronous collective. Copyable; all copies share the completion. The
// buffers passed to the collective must stay alive and untouched until wait() returned (or done()
// returned true). A default-constructed handle is already complete with OK.
class [[nodiscard]] CommHandle {
 public:
  CommHandle() = default;
  explicit CommHandle(std::shared_ptr<CommCompletion> completion)
      : completion_(std::move(completion)) {}
  // A handle that is already complete with `status` (used for argument errors and poisoned
  // communicators).
  static CommHandle ready(Status status);

  // Blocks until the collective finished and returns its Status (kDeadlineExceeded on a collective
  // timeout). May be called several times and from any thread.
  Status wait() const { return completion_ ? completion_->wait() : Status(); }
  // True when wait() would not block.
  bool done() const { return completion_ ? completion_->done() : true; }

 private:
  std::shared_ptr<CommCompletion> completion_;
};

}  // namespace zero
