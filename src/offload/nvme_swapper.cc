// NvmeSwapper implementation: requests are cut into block_size chunks, spread over
// intra_op_parallelism workers; each worker owns one I/O engine (io_uring ring, libaio context or
// synchronous pread/pwrite), queue_depth staging slots and keeps at most queue_depth chunks in
// flight.
#include "offload/nvme_swapper.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "core/check.h"
#include "offload/io_engine.h"
#include "offload/swap_dir.h"

namespace zero::offload {
namespace {
// Marks a directory a swapper created (see ~Impl): hidden, and never mistaken for a swap file.
constexpr const char* kCreatedMarker = ".zero_swap_dir";
}  // namespace

const char* io_backend_name(IoBackend backend) {
  switch (backend) {
    case IoBackend::kAuto: return "auto";
    case IoBackend::kIoUring: return "io_uring";
    case IoBackend::kLibaio: return "libaio";
    case IoBackend::kThreadPool: return "thread_pool";
  }
  return "?";
}

namespace {

uint64_t round_up(uint64_t n, uint64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

std::string errno_text(int err) { return std::strerror(err); }

// RAII file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Page-aligned host memory for O_DIRECT staging (aligned_alloc_bytes only promises 64 bytes).
struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};
using PageBuffer = std::unique_ptr<std::byte[], FreeDeleter>;
PageBuffer alloc_page_buffer(size_t nbytes) {
  void* p = std::aligned_alloc(kDirectIoAlignBytes, round_up(nbytes, kDirectIoAlignBytes));
  ZERO_CHECK(p != nullptr, "aligned_alloc of ", nbytes, " bytes failed");
  return PageBuffer(static_cast<std::byte*>(p));
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct SwapFile {
  std::string file_class;
  std::string path;
  UniqueFd fd;
  uint64_t capacity_bytes = 0;
  bool direct = true;
};

struct Request {
  int64_t chunks_left = 0;
  Status status;  // first error
};

struct Chunk {
  Request* request;  // owned by Impl::requests_, erased only after chunks_left reaches 0
  const SwapFile* file;
  bool is_write;
  uint64_t offset_bytes;
  size_t logical_bytes;
  std::byte* user_buffer;
};

class Worker;

class NvmeSwapper::Impl {
 public:
  explicit Impl(const NvmeSwapperOptions& options) : options_(options) {}
  ~Impl();

  Status init();
  Status add_file(const std::string& file_class, uint64_t capacity_bytes);
  StatusOr<Ticket> submit(const std::string& file_class, uint64_t offset_bytes, size_t nbytes,
                          std::byte* buffer, bool is_write);
  Status wait(Ticket ticket);
  Status wait_all();
  // Called by workers when a chunk is finished (with its error, or ok).
  void complete_chunk(Request* request, Status status);

  NvmeFaultHook* hook() const { return options_.fault_hook; }

  NvmeSwapperOptions options_;
  IoBackend backend_ = IoBackend::kAuto;
  std::vector<std::string> created_dirs_;  // outermost first
  // This swapper's own directory under nvme_path (fresh, 0700, named after the pid and rank, locked
  // while it lives: swap_dir.h), so two jobs or a planted symlink can never touch its files, and a
  // later run reclaims it if this process is killed.
  std::unique_ptr<SwapDir> swap_dir_;
  std::string private_dir_;  // swap_dir_->path()

  mutable std::mutex mu_;  // guards files_, requests_, next_ticket_
  std::condition_variable done_cv_;
  std::map<std::string, std::unique_ptr<SwapFile>> files_;
  std::unordered_map<uint64_t, std::unique_ptr<Request>> requests_;
  uint64_t next_ticket_ = 1;

  std::vector<std::unique_ptr<Worker>> workers_;
};

// One I/O thread with its engine and queue_depth staging slots of block_size bytes.
class Worker {
 public:
  Worker(NvmeSwapper::Impl* owner, const AioConfig& aio)
      : owner_(owner), aio_(aio), slots_(static_cast<size_t>(aio.queue_depth)) {
    staging_ = alloc_page_buffer(static_cast<size_t>(aio.queue_depth) * aio.block_size_bytes);
    for (int i = 0; i < aio.queue_depth; ++i) {
      iovecs_.push_back({staging_.get() + static_cast<size_t>(i) * aio.block_size_bytes,
                         static_cast<size_t>(aio.block_size_bytes)});
      free_slots_.push_back(i);
    }
  }
  ~Worker() { stop(); }

  Status start_engine(IoBackend backend) {
    if (NvmeFaultHook* hook = owner_->hook()) {
      if (int err = hook->on_engine_init(backend); err != 0) {
        return io_error("{} init failed: {}", io_backend_name(backend), errno_text(err));
      }
    }
    ZERO_ASSIGN_OR_RETURN(engine_, make_io_engine(backend, aio_.queue_depth, iovecs_));
    thread_ = std::thread([this] { run(); });
    return ok_status();
  }

  void enqueue(std::vector<Chunk> chunks) {
    {
      std::lock_guard lock(mu_);
      for (auto& c : chunks) pending_.push_back(c);
    }
    cv_.notify_one();
  }

  void stop() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }

 private:
  struct InFlight {
    Chunk chunk;
    size_t padded_bytes = 0;
    bool staged = false;
  };

  void run() {
    std::deque<Chunk> local;
    std::vector<EngineOp> batch;
    std::vector<EngineCompletion> completions;
    for (;;) {
      {
        std::unique_lock lock(mu_);
        if (local.empty() && in_flight_count_ == 0) {
          // Why wait: idle — nothing queued and nothing in flight; sleep until a submit or stop.
          cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
          if (pending_.empty()) return;  // stop_ with no work left
        }
        while (!pending_.empty()) {
          local.push_back(pending_.front());
          pending_.pop_front();
        }
      }
      // overlap_events: top the ring up whenever a slot is free; otherwise submit a batch and
      // drain it completely before the next one (DeepSpeed's submit-wait-submit).
      if (aio_.overlap_events || in_flight_count_ == 0) {
        batch.clear();
        while (!local.empty() && !free_slots_.empty()) {
          batch.push_back(prepare(local.front()));
          local.pop_front();
          if (aio_.single_submit) {
            engine_->submit(batch);
            batch.clear();
          }
        }
        if (!batch.empty()) engine_->submit(batch);
      }
      if (in_flight_count_ > 0) {
        completions.clear();
        engine_->reap(aio_.overlap_events ? 1 : in_flight_count_, &completions);
        for (const auto& c : completions) finish(c);
      }
    }
  }

  EngineOp prepare(const Chunk& chunk) {
    const int slot = free_slots_.back();
    free_slots_.pop_back();
    ++in_flight_count_;
    InFlight& f = slots_[static_cast<size_t>(slot)];
    f.chunk = chunk;
    f.padded_bytes = chunk.file->direct ? round_up(chunk.logical_bytes, kDirectIoAlignBytes)
                                        : chunk.logical_bytes;
    const bool aligned = reinterpret_cast<uintptr_t>(chunk.user_buffer) % kDirectIoAlignBytes == 0;
    f.staged = chunk.file->direct && (!aligned || f.padded_bytes != chunk.logical_bytes);
    void* buffer = chunk.user_buffer;
    if (f.staged) {
      auto* stage = static_cast<std::byte*>(iovecs_[static_cast<size_t>(slot)].iov_base);
      if (chunk.is_write) {
        std::memcpy(stage, chunk.user_buffer, chunk.logical_bytes);
        std::memset(stage + chunk.logical_bytes, 0, f.padded_bytes - chunk.logical_bytes);
      }
      buffer = stage;
    }
    return EngineOp{chunk.file->fd.get(),
                    chunk.is_write,
                    buffer,
                    f.padded_bytes,
                    chunk.offset_bytes,
                    f.staged ? slot : -1,
                    static_cast<uint64_t>(slot)};
  }

  void finish(const EngineCompletion& c) {
    const int slot = static_cast<int>(c.tag);
    InFlight& f = slots_[static_cast<size_t>(slot)];
    const Chunk& chunk = f.chunk;
    int64_t result = c.result;
    if (NvmeFaultHook* hook = owner_->hook()) {
      IoRequestInfo info{&chunk.file->path, chunk.is_write, chunk.offset_bytes, f.padded_bytes};
      result = hook->on_completion(info, result);
    }
    const char* verb = chunk.is_write ? "write" : "read";
    Status status;
    if (result < 0) {
      status = io_error("NVMe {} of {} at offset {} ({} bytes) failed: {}", verb, chunk.file->path,
                        chunk.offset_bytes, f.padded_bytes, errno_text(static_cast<int>(-result)));
      if (result == -ENOSPC) status = Status(StatusCode::kResourceExhausted, status.message());
    } else if (static_cast<uint64_t>(result) < f.padded_bytes) {
      status = io_error("short NVMe {} of {} at offset {}: {} of {} bytes", verb, chunk.file->path,
                        chunk.offset_bytes, result, f.padded_bytes);
    } else if (f.staged && !chunk.is_write) {
      std::memcpy(chunk.user_buffer, iovecs_[static_cast<size_t>(slot)].iov_base,
                  chunk.logical_bytes);
    }
    free_slots_.push_back(slot);
    --in_flight_count_;
    owner_->complete_chunk(chunk.request, std::move(status));
  }

  NvmeSwapper::Impl* owner_;
  AioConfig aio_;
  std::unique_ptr<IoEngine> engine_;
  PageBuffer staging_;
  std::vector<iovec> iovecs_;
  // Touched only by the worker thread:
  std::vector<InFlight> slots_;
  std::vector<int> free_slots_;
  int in_flight_count_ = 0;

  std::mutex mu_;  // guards pending_, stop_
  std::condition_variable cv_;
  std::deque<Chunk> pending_;
  bool stop_ = false;
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------

NvmeSwapper::Impl::~Impl() {
  Status status = wait_all();
  if (!status.ok())
    spdlog::error("NvmeSwapper: outstanding I/O failed at shutdown: {}", status.to_string());
  workers_.clear();  // joins the threads, then tears down rings and staging buffers
  for (auto& [file_class, file] : files_) {
    file->fd.reset();
    if (::unlink(file->path.c_str()) != 0) {
      spdlog::warn("NvmeSwapper: could not remove {}: {}", file->path, errno_text(errno));
    }
  }
  swap_dir_.reset();  // its lock file and the directory, now empty
  // Directories a swapper of this run created (they hold kCreatedMarker) go once nothing else is
  // in them. Several swappers (ranks, or the parameter and optimizer swappers of one rank) may
  // share them, so whoever finishes last removes them; a directory still in use is left alone.
  for (auto it = created_dirs_.rbegin(); it != created_dirs_.rend(); ++it) {
    std::error_code ec;
    bool only_marker = true;
    for (const auto& entry : std::filesystem::directory_iterator(*it, ec)) {
      if (entry.path().filename() != kCreatedMarker) {
        only_marker = false;
        break;
      }
    }
    if (ec || !only_marker) continue;
    ::unlink((std::filesystem::path(*it) / kCreatedMarker).c_str());
    if (::rmdir(it->c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY) {
      spdlog::warn("NvmeSwapper: could not remove directory {} it created: {}", *it,
                   errno_text(errno));
    }
  }
}

Status NvmeSwapper::Impl::init() {
  ZERO_RETURN_IF_ERROR(validate_aio_config(options_.aio));
  if (options_.nvme_path.empty()) return invalid_argument("nvme_path is empty");
  // Create nvme_path component by component, remembering what we made so we remove only that.
  std::filesystem::path target = std::filesystem::absolute(options_.nvme_path).lexically_normal();
  std::filesystem::path prefix;
  for (const auto& part : target) {
    prefix /= part;
    if (part.empty() || prefix == prefix.root_path()) continue;
    struct stat st {};
    if (::stat(prefix.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        return failed_precondition("nvme_path {}: {} is not a directory", options_.nvme_path,
                                   prefix.string());
      }
      // Made by another swapper of this run (another rank, or this rank's other swapper): share
      // the duty of removing it.
      if (::access((prefix / kCreatedMarker).c_str(), F_OK) == 0) {
        created_dirs_.push_back(prefix.string());
      }
      continue;
    }
    if (::mkdir(prefix.c_str(), 0755) != 0) {
      if (errno != EEXIST) {
        return io_error("nvme_path {}: cannot create {}: {}", options_.nvme_path, prefix.string(),
                        errno_text(errno));
      }
      // Lost a race with another rank creating it: treat as made by that rank (marker or not).
      if (::access((prefix / kCreatedMarker).c_str(), F_OK) == 0) {
        created_dirs_.push_back(prefix.string());
      }
      continue;
    }
    // Mark it ours, so every swapper of the run (whichever finishes last) may remove it.
    const int marker = ::open((prefix / kCreatedMarker).c_str(), O_CREAT | O_WRONLY, 0644);
    if (marker >= 0) ::close(marker);
    created_dirs_.push_back(prefix.string());
  }
  // Another local user could plant files or symlinks in a world-writable directory unless the
  // sticky bit stops them from replacing ours (as in /tmp).
  struct stat st {};
  if (::stat(target.c_str(), &st) != 0) {
    return io_error("nvme_path {}: {}", options_.nvme_path, errno_text(errno));
  }
  if ((st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return failed_precondition(
        "nvme_path {} is world-writable without the sticky bit (mode {:o}): any local user could "
        "replace the swap files; use a directory of your own or chmod +t it",
        options_.nvme_path, st.st_mode & 07777);
  }
  // Runs killed on this nvme_path (SIGKILL, the OOM killer) left their swap files: at 13B scale
  // hundreds of GB. Their directories' locks died with them; live runs' are held.
  for (const ReclaimedSwapDir& r : reclaim_dead_swap_dirs(target.string())) {
    spdlog::warn(
        "NvmeSwapper: {} {} ({} swap files, {} bytes = {:.1f} MiB) of a run that no "
        "longer runs (its lock is free; was {})",
        r.complete ? "removed" : "partly removed", r.path, r.files, r.bytes,
        static_cast<double>(r.bytes) / (1 << 20), r.holder);
  }
  ZERO_ASSIGN_OR_RETURN(swap_dir_, SwapDir::create(target.string(), options_.rank));
  private_dir_ = swap_dir_->path();

  std::vector<IoBackend> candidates;
  if (options_.backend == IoBackend::kAuto) {
    candidates = {IoBackend::kIoUring, IoBackend::kLibaio, IoBackend::kThreadPool};
#if !defined(ZERO_WITH_LIBAIO)
    candidates = {IoBackend::kIoUring, IoBackend::kThreadPool};
#endif
  } else {
    candidates = {options_.backend};
  }
  Status last;
  for (IoBackend backend : candidates) {
    workers_.clear();
    last = ok_status();
    for (int i = 0; i < options_.aio.intra_op_parallelism && last.ok(); ++i) {
      workers_.push_back(std::make_unique<Worker>(this, options_.aio));
      last = workers_.back()->start_engine(backend);
    }
    if (last.ok()) {
      backend_ = backend;
      return ok_status();
    }
    if (options_.backend == IoBackend::kAuto && backend != candidates.back()) {
      spdlog::warn("NvmeSwapper: {}; falling back to the next I/O backend", last.message());
    }
  }
  workers_.clear();
  return last.with_context(fmt::format("NvmeSwapper({})", options_.nvme_path));
}

Status NvmeSwapper::Impl::add_file(const std::string& file_class, uint64_t capacity_bytes) {
  if (file_class.empty() || !std::all_of(file_class.begin(), file_class.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
      })) {
    return invalid_argument("swap file class '{}' must match [A-Za-z0-9_-]+", file_class);
  }
  {
    std::lock_guard lock(mu_);
    if (files_.count(file_class))
      return Status(StatusCode::kAlreadyExists,
                    fmt::format("swap file class '{}' already added", file_class));
  }
  auto file = std::make_unique<SwapFile>();
  file->file_class = file_class;
  file->path = (std::filesystem::path(private_dir_) /
                fmt::format("zero_rank{}_{}.swp", options_.rank, file_class))
                   .string();
  file->capacity_bytes = round_up(std::max<uint64_t>(capacity_bytes, 1), kDirectIoAlignBytes);

  struct statvfs vfs {};
  if (::statvfs(options_.nvme_path.c_str(), &vfs) != 0) {
    return io_error("statvfs({}): {}", options_.nvme_path, errno_text(errno));
  }
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  auto disk_full = [&](const char* what) {
    return resource_exhausted(
        "nvme_path {} is too small for {}: {} bytes needed, {} bytes free ({})", options_.nvme_path,
        file->path, file->capacity_bytes, free_bytes, what);
  };
  if (file->capacity_bytes > free_bytes) return disk_full("checked before preallocation");

  // O_EXCL | O_NOFOLLOW: a file or symlink that is already there (it cannot be, in a fresh 0700
  // directory, unless something is wrong) is an error, never followed or truncated.
  const int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int open_errno = hook() != nullptr ? hook()->on_open_direct(file->path) : 0;
  if (open_errno == 0) {
    file->fd = UniqueFd(::open(file->path.c_str(), flags | O_DIRECT, 0600));
    if (file->fd.get() < 0) open_errno = errno;
  }
  if (file->fd.get() < 0 && open_errno == EINVAL && options_.allow_buffered_fallback) {
    // tmpfs and some network file systems refuse O_DIRECT: correctness does not need it, only
    // bandwidth and page-cache pressure do.
    spdlog::warn("NvmeSwapper: {} refuses O_DIRECT; using buffered I/O (page cache) for {}",
                 options_.nvme_path, file->path);
    file->direct = false;
    ::unlink(file->path.c_str());  // the refused open may have created it (our own directory)
    file->fd = UniqueFd(::open(file->path.c_str(), flags, 0600));
  }
  if (file->fd.get() < 0) {
    const int err = file->direct ? open_errno : errno;
    return io_error("cannot open swap file {}: {}", file->path, errno_text(err));
  }

  int err = 0;
  if (NvmeFaultHook* h = hook()) err = h->on_preallocate(file->path, file->capacity_bytes);
  if (err == 0 &&
      ::fallocate(file->fd.get(), 0, 0, static_cast<off_t>(file->capacity_bytes)) != 0) {
    err = errno;
    if (err == EOPNOTSUPP &&
        ::ftruncate(file->fd.get(), static_cast<off_t>(file->capacity_bytes)) == 0) {
      spdlog::warn("NvmeSwapper: fallocate unsupported under {}; {} is sparse", options_.nvme_path,
                   file->path);
      err = 0;
    }
  }
  if (err != 0) {
    file->fd.reset();
    ::unlink(file->path.c_str());
    if (err == ENOSPC || err == EDQUOT) return disk_full(errno_text(err).c_str());
    return io_error("preallocating {} bytes for {} failed: {}", file->capacity_bytes, file->path,
                    errno_text(err));
  }
  std::lock_guard lock(mu_);
  files_.emplace(file_class, std::move(file));
  return ok_status();
}

StatusOr<Ticket> NvmeSwapper::Impl::submit(const std::string& file_class, uint64_t offset_bytes,
                                           size_t nbytes, std::byte* buffer, bool is_write) {
  const SwapFile* file = nullptr;
  Request* request = nullptr;
  Ticket ticket;
  {
    std::lock_guard lock(mu_);
    auto it = files_.find(file_class);
    if (it == files_.end()) return not_found("no swap file for class '{}'", file_class);
    file = it->second.get();
    if (offset_bytes % kDirectIoAlignBytes != 0) {
      return invalid_argument("{}: offset {} is not a multiple of {} bytes", file->path,
                              offset_bytes, kDirectIoAlignBytes);
    }
    if (offset_bytes + NvmeSwapper::slot_bytes(nbytes) > file->capacity_bytes) {
      return Status(
          StatusCode::kOutOfRange,
          fmt::format("{}: [{}, {}) is past its capacity of {} bytes", file->path, offset_bytes,
                      offset_bytes + NvmeSwapper::slot_bytes(nbytes), file->capacity_bytes));
    }
    if (nbytes > 0 && buffer == nullptr)
      return invalid_argument("null buffer for {} bytes", nbytes);
    ticket.id = next_ticket_++;
    auto req = std::make_unique<Request>();
    request = req.get();
    const uint64_t block = options_.aio.block_size_bytes;
    request->chunks_left = static_cast<int64_t>((nbytes + block - 1) / block);
    requests_.emplace(ticket.id, std::move(req));
  }
  // Contiguous runs of chunks per worker (as DeepSpeed splits a request into T byte ranges).
  const uint64_t block = options_.aio.block_size_bytes;
  const size_t chunk_count = static_cast<size_t>(request->chunks_left);
  const size_t worker_count = workers_.size();
  std::vector<std::vector<Chunk>> per_worker(worker_count);
  for (size_t i = 0; i < chunk_count; ++i) {
    const uint64_t chunk_offset = i * block;
    per_worker[i * worker_count / chunk_count].push_back(
        Chunk{request, file, is_write, offset_bytes + chunk_offset,
              static_cast<size_t>(std::min<uint64_t>(block, nbytes - chunk_offset)),
              buffer + chunk_offset});
  }
  for (size_t w = 0; w < worker_count; ++w) {
    if (!per_worker[w].empty()) workers_[w]->enqueue(std::move(per_worker[w]));
  }
  return ticket;
}

void NvmeSwapper::Impl::complete_chunk(Request* request, Status status) {
  std::lock_guard lock(mu_);
  if (!status.ok() && request->status.ok()) request->status = std::move(status);
  if (--request->chunks_left == 0) done_cv_.notify_all();
}

Status NvmeSwapper::Impl::wait(Ticket ticket) {
  std::unique_lock lock(mu_);
  auto it = requests_.find(ticket.id);
  if (it == requests_.end()) {
    return failed_precondition("unknown NVMe ticket {} (never issued or already waited)",
                               ticket.id);
  }
  Request* request = it->second.get();
  // Why wait: the caller needs its buffer back (filled, or free to reuse) before going on.
  done_cv_.wait(lock, [&] { return request->chunks_left == 0; });
  Status status = std::move(request->status);
  requests_.erase(ticket.id);
  return status;
}

Status NvmeSwapper::Impl::wait_all() {
  std::unique_lock lock(mu_);
  // Why wait: a barrier over all outstanding reads/writes (end of a step, shutdown).
  done_cv_.wait(lock, [&] {
    return std::all_of(requests_.begin(), requests_.end(),
                       [](const auto& kv) { return kv.second->chunks_left == 0; });
  });
  Status first;
  for (auto& [id, request] : requests_) {
    if (first.ok() && !request->status.ok()) first = request->status;
  }
  requests_.clear();
  return first;
}

// ---------------------------------------------------------------------------------------------

NvmeSwapper::NvmeSwapper(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NvmeSwapper::~NvmeSwapper() = default;

StatusOr<std::unique_ptr<NvmeSwapper>> NvmeSwapper::create(const NvmeSwapperOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  Status status = impl->init();
  if (!status.ok()) return status;  // ~Impl removes the directories init made
  return std::unique_ptr<NvmeSwapper>(new NvmeSwapper(std::move(impl)));
}

Status NvmeSwapper::add_file(const std::string& file_class, uint64_t capacity_bytes) {
  return impl_->add_file(file_class, capacity_bytes);
}
StatusOr<Ticket> NvmeSwapper::submit_read(const std::string& file_class, uint64_t offset_bytes,
                                          size_t nbytes, void* dst) {
  return impl_->submit(file_class, offset_bytes, nbytes, static_cast<std::byte*>(dst), false);
}
StatusOr<Ticket> NvmeSwapper::submit_write(const std::string& file_class, uint64_t offset_bytes,
                                           size_t nbytes, const void* src) {
  // The buffer is only read on this path; the shared Chunk type carries a mutable pointer.
  return impl_->submit(file_class, offset_bytes, nbytes,
                       const_cast<std::byte*>(static_cast<const std::byte*>(src)), true);
}
Status NvmeSwapper::wait(Ticket ticket) { return impl_->wait(ticket); }
Status NvmeSwapper::wait_all() { return impl_->wait_all(); }

Status NvmeSwapper::read(const std::string& file_class, uint64_t offset_bytes, size_t nbytes,
                         void* dst) {
  ZERO_ASSIGN_OR_RETURN(Ticket ticket, submit_read(file_class, offset_bytes, nbytes, dst));
  return wait(ticket);
}
Status NvmeSwapper::write(const std::string& file_class, uint64_t offset_bytes, size_t nbytes,
                          const void* src) {
  ZERO_ASSIGN_OR_RETURN(Ticket ticket, submit_write(file_class, offset_bytes, nbytes, src));
  return wait(ticket);
}

uint64_t NvmeSwapper::slot_bytes(uint64_t nbytes) { return round_up(nbytes, kDirectIoAlignBytes); }
IoBackend NvmeSwapper::backend() const { return impl_->backend_; }
bool NvmeSwapper::direct_io() const {
  std::lock_guard lock(impl_->mu_);
  return std::all_of(impl_->files_.begin(), impl_->files_.end(),
                     [](const auto& kv) { return kv.second->direct; });
}
const AioConfig& NvmeSwapper::aio_config() const { return impl_->options_.aio; }
std::string NvmeSwapper::file_path(const std::string& file_class) const {
  std::lock_guard lock(impl_->mu_);
  auto it = impl_->files_.find(file_class);
  return it == impl_->files_.end() ? std::string() : it->second->path;
}
uint64_t NvmeSwapper::capacity_bytes(const std::string& file_class) const {
  std::lock_guard lock(impl_->mu_);
  auto it = impl_->files_.find(file_class);
  return it == impl_->files_.end() ? 0 : it->second->capacity_bytes;
}

}  // namespace zero::offload
