// The NVMe swapper's I/O engines (io_engine.h).
#include "offload/io_engine.h"

#include <liburing.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

#include "core/check.h"

#if defined(ZERO_WITH_LIBAIO)
#include <libaio.h>
#endif

namespace zero::offload {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

class UringEngine : public IoEngine {
 public:
  static StatusOr<std::unique_ptr<IoEngine>> create(int queue_depth,
                                                    std::span<const iovec> staging_slots) {
    auto engine = std::unique_ptr<UringEngine>(new UringEngine());
    int rc = io_uring_queue_init(static_cast<unsigned>(queue_depth), &engine->ring_, 0);
    if (rc < 0) return io_error("io_uring_queue_init failed: {}", errno_text(-rc));
    engine->ring_ok_ = true;
    rc = io_uring_register_buffers(&engine->ring_, staging_slots.data(),
                                   static_cast<unsigned>(staging_slots.size()));
    if (rc < 0) {
      // Registration pins memory against RLIMIT_MEMLOCK (8 MiB for non-root users here); plain
      // READ/WRITE on the same buffers still works, only the per-I/O page-pinning saving is lost.
      spdlog::warn("io_uring_register_buffers ({} slots) failed: {}; using unregistered buffers",
                   staging_slots.size(), errno_text(-rc));
    } else {
      engine->fixed_ = true;
    }
    return std::unique_ptr<IoEngine>(std::move(engine));
  }
  ~UringEngine() override {
    if (ring_ok_) io_uring_queue_exit(&ring_);  // also unregisters the buffers
  }

  void submit(std::span<const EngineOp> ops) override {
    for (const EngineOp& op : ops) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      // The worker keeps at most queue_depth ops in flight and the SQ has >= queue_depth entries.
      ZERO_CHECK(sqe != nullptr, "io_uring submission queue full");
      const unsigned len = static_cast<unsigned>(op.length_bytes);
      if (op.fixed_index >= 0 && fixed_) {
        if (op.is_write) {
          io_uring_prep_write_fixed(sqe, op.fd, op.buffer, len, op.offset_bytes, op.fixed_index);
        } else {
          io_uring_prep_read_fixed(sqe, op.fd, op.buffer, len, op.offset_bytes, op.fixed_index);
        }
      } else if (op.is_write) {
        io_uring_prep_write(sqe, op.fd, op.buffer, len, op.offset_bytes);
      } else {
        io_uring_prep_read(sqe, op.fd, op.buffer, len, op.offset_bytes);
      }
      io_uring_sqe_set_data64(sqe, op.tag);
    }
    flush();
  }

  void reap(int min_completions, std::vector<EngineCompletion>* out) override {
    int got = 0;
    while (got < min_completions) {
      // Why wait: the worker has nothing else to do until the kernel finishes a chunk; the
      // submit_and_wait also pushes SQEs a transient EAGAIN/EBUSY left in the ring.
      int rc = io_uring_submit_and_wait(&ring_, static_cast<unsigned>(min_completions - got));
      if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
        ZERO_CHECK(false, "io_uring_submit_and_wait: ", errno_text(-rc));
      }
      io_uring_cqe* cqes[64];
      unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, 64);
      for (unsigned i = 0; i < n; ++i) {
        out->push_back({io_uring_cqe_get_data64(cqes[i]), cqes[i]->res});
      }
      io_uring_cq_advance(&ring_, n);
      got += static_cast<int>(n);
    }
  }

  bool fixed_buffers() const override { return fixed_; }

 private:
  UringEngine() = default;
  void flush() {
    for (;;) {
      int rc = io_uring_submit(&ring_);
      if (rc >= 0 || rc == -EAGAIN || rc == -EBUSY) return;  // leftovers go with the next wait
      if (rc == -EINTR) continue;
      ZERO_CHECK(false, "io_uring_submit: ", errno_text(-rc));
    }
  }
  io_uring ring_{};
  bool ring_ok_ = false;
  bool fixed_ = false;
};

#if defined(ZERO_WITH_LIBAIO)
class LibaioEngine : public IoEngine {
 public:
  static StatusOr<std::unique_ptr<IoEngine>> create(int queue_depth) {
    auto engine = std::unique_ptr<LibaioEngine>(new LibaioEngine());
    int rc = io_setup(queue_depth, &engine->ctx_);
    if (rc < 0) return io_error("io_setup({}) failed: {}", queue_depth, errno_text(-rc));
    engine->ctx_ok_ = true;
    engine->iocbs_.resize(static_cast<size_t>(queue_depth) * 2);
    engine->events_.resize(static_cast<size_t>(queue_depth));
    return std::unique_ptr<IoEngine>(std::move(engine));
  }
  ~LibaioEngine() override {
    if (ctx_ok_) io_destroy(ctx_);
  }
  void submit(std::span<const EngineOp> ops) override {
    std::vector<iocb*> ptrs;
    for (const EngineOp& op : ops) {
      iocb& cb = iocbs_[op.tag % iocbs_.size()];
      if (op.is_write) {
        io_prep_pwrite(&cb, op.fd, op.buffer, op.length_bytes,
                       static_cast<long long>(op.offset_bytes));
      } else {
        io_prep_pread(&cb, op.fd, op.buffer, op.length_bytes,
                      static_cast<long long>(op.offset_bytes));
      }
      cb.data = reinterpret_cast<void*>(op.tag);
      ptrs.push_back(&cb);
    }
    size_t done = 0;
    while (done < ptrs.size()) {
      int rc = io_submit(ctx_, static_cast<long>(ptrs.size() - done), ptrs.data() + done);
      if (rc > 0) {
        done += static_cast<size_t>(rc);
      } else if (rc == -EINTR || rc == -EAGAIN) {
        std::this_thread::yield();
      } else {
        // The first remaining iocb was rejected: report it as its completion and go on.
        synthesized_.push_back({reinterpret_cast<uint64_t>(ptrs[done]->data), rc == 0 ? -EIO : rc});
        ++done;
      }
    }
  }
  void reap(int min_completions, std::vector<EngineCompletion>* out) override {
    int got = 0;
    for (const auto& c : synthesized_) out->push_back(c), ++got;
    synthesized_.clear();
    while (got < min_completions) {
      // Why wait: nothing to do until the kernel completes a chunk.
      int rc = io_getevents(ctx_, min_completions - got, static_cast<long>(events_.size()),
                            events_.data(), nullptr);
      if (rc == -EINTR) continue;
      ZERO_CHECK(rc >= 0, "io_getevents: ", errno_text(-rc));
      for (int i = 0; i < rc; ++i) {
        out->push_back({reinterpret_cast<uint64_t>(events_[i].data),
                        static_cast<int64_t>(static_cast<long>(events_[i].res))});
      }
      got += rc;
    }
  }

 private:
  LibaioEngine() = default;
  io_context_t ctx_{};
  bool ctx_ok_ = false;
  std::vector<iocb> iocbs_;
  std::vector<io_event> events_;
  std::vector<EngineCompletion> synthesized_;
};
#endif

// Synchronous fallback: the worker thread itself does pread/pwrite, so intra_op_parallelism
// workers form the thread pool.
class SyncEngine : public IoEngine {
 public:
  void submit(std::span<const EngineOp> ops) override {
    for (const EngineOp& op : ops) {
      size_t done_bytes = 0;
      int64_t result = 0;
      while (done_bytes < op.length_bytes) {
        auto* p = static_cast<std::byte*>(op.buffer) + done_bytes;
        const size_t n = op.length_bytes - done_bytes;
        const off_t off = static_cast<off_t>(op.offset_bytes + done_bytes);
        ssize_t rc = op.is_write ? ::pwrite(op.fd, p, n, off) : ::pread(op.fd, p, n, off);
        if (rc < 0 && errno == EINTR) continue;
        if (rc < 0) {
          result = -errno;
          break;
        }
        if (rc == 0) break;  // EOF (reads) or no progress: reported as a short transfer
        done_bytes += static_cast<size_t>(rc);
      }
      done_.push_back({op.tag, result < 0 ? result : static_cast<int64_t>(done_bytes)});
    }
  }
  void reap(int min_completions, std::vector<EngineCompletion>* out) override {
    ZERO_CHECK(static_cast<int>(done_.size()) >= min_completions, "sync engine: ", done_.size(),
               " < ", min_completions);
    out->insert(out->end(), done_.begin(), done_.end());
    done_.clear();
  }

 private:
  std::vector<EngineCompletion> done_;
};

}  // namespace

StatusOr<std::unique_ptr<IoEngine>> make_io_engine(IoBackend backend, int queue_depth,
                                                   std::span<const iovec> staging_slots) {
  switch (backend) {
    case IoBackend::kIoUring: return UringEngine::create(queue_depth, staging_slots);
    case IoBackend::kLibaio:
#if defined(ZERO_WITH_LIBAIO)
      return LibaioEngine::create(queue_depth);
#else
      return unimplemented("libaio support is not built in (ZERO_WITH_LIBAIO)");
#endif
    case IoBackend::kThreadPool: return std::unique_ptr<IoEngine>(std::make_unique<SyncEngine>());
    case IoBackend::kAuto: break;
  }
  ZERO_CHECK(false, "kAuto is resolved by the caller");
  return internal_error("unreachable");
}

}  // namespace zero::offload
