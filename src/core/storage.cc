// PosixStorage (pread/write/fsync/rename/statvfs), the in-memory read-only file, the atomic-write
// helper, and the fault-injecting wrapper.
#include "core/storage.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/regular_file.h"

namespace zero {
namespace {

namespace fs = std::filesystem;

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

Status posix_error(const std::string& what, const std::string& path, int err) {
  return io_error("{}: {} failed: {}", path, what, errno_text(err));
}

// Owns a file descriptor; closes it on destruction.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

class PosixRandomAccessFile : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}

  Status read_at(uint64_t offset, size_t n, void* dst) const override {
    if (offset > size_ || n > size_ - offset) {
      return data_loss("{}: read of {} bytes at offset {} is past the end of the file ({} bytes)",
                       path_, n, offset, size_);
    }
    char* out = static_cast<char*>(dst);
    while (n > 0) {
      ssize_t got = ::pread(fd_.get(), out, n, static_cast<off_t>(offset));
      if (got < 0) {
        if (errno == EINTR) continue;
        return posix_error("read", path_, errno);
      }
      if (got == 0) return data_loss("{}: file shrank while reading at offset {}", path_, offset);
      out += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<size_t>(got);
    }
    return ok_status();
  }
  uint64_t size() const override { return size_; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  Fd fd_;
  uint64_t size_;
};

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  Status append(const void* data, size_t n) override {
    ZERO_RETURN_IF_ERROR(write_at(size_, data, n));
    return ok_status();
  }
  Status write_at(uint64_t offset, const void* data, size_t n) override {
    if (fd_.get() < 0) return io_error("{}: write after close", path_);
    const char* in = static_cast<const char*>(data);
    uint64_t pos = offset;
    size_t left = n;
    while (left > 0) {
      ssize_t put = ::pwrite(fd_.get(), in, left, static_cast<off_t>(pos));
      if (put < 0) {
        if (errno == EINTR) continue;
        return posix_error("write", path_, errno);
      }
      in += put;
      pos += static_cast<uint64_t>(put);
      left -= static_cast<size_t>(put);
      size_ = std::max(size_, pos);
    }
    return ok_status();
  }
  Status flush() override {
    if (fd_.get() < 0) return io_error("{}: flush after close", path_);
    return ok_status();
  }
  Status sync() override {
    if (fd_.get() < 0) return io_error("{}: sync after close", path_);
    if (::fsync(fd_.get()) != 0) return posix_error("fsync", path_, errno);
    return ok_status();
  }
  Status close() override {
    if (fd_.get() < 0) return ok_status();
    int fd = fd_.release();
    if (::close(fd) != 0) return posix_error("close", path_, errno);
    return ok_status();
  }
  uint64_t size() const override { return size_; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  Fd fd_;
  uint64_t size_ = 0;
};

class PosixStorage : public Storage {
 public:
  StatusOr<std::unique_ptr<RandomAccessFile>> open_read(const std::string& path) override {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below like any file
    // that is not regular (a device would never end, or its size would be meaningless).
    Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (fd.get() < 0) {
      int err = errno;
      if (err == ENOENT) return not_found("{}: no such file", path);
      return posix_error("open", path, err);
    }
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return posix_error("stat", path, errno);
    if (S_ISDIR(st.st_mode)) return invalid_argument("{}: is a directory, not a file", path);
    if (!S_ISREG(st.st_mode)) {
      return invalid_argument("{}: is {}, not a regular file", path, file_type_name(st.st_mode));
    }
    return std::unique_ptr<RandomAccessFile>(
        new PosixRandomAccessFile(path, fd.release(), static_cast<uint64_t>(st.st_size)));
  }

  StatusOr<std::unique_ptr<WritableFile>> open_write(const std::string& path) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return posix_error("create", path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
  }

  Status exchange(const std::string& a, const std::string& b) override {
    if (::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) != 0) {
      if (errno == ENOSYS || errno == EINVAL) {
        return unimplemented("{} <-> {}: RENAME_EXCHANGE is not supported here", a, b);
      }
      return io_error("{}: exchange with {} failed: {}", a, b, errno_text(errno));
    }
    return ok_status();
  }

  Status rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return io_error("{}: rename to {} failed: {}", from, to, errno_text(errno));
    }
    return ok_status();
  }

  Status remove_file(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) {
      int err = errno;
      if (err == ENOENT) return not_found("{}: no such file", path);
      return posix_error("remove", path, err);
    }
    return ok_status();
  }

  Status remove_dir(const std::string& path) override {
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec) return io_error("{}: recursive remove failed: {}", path, ec.message());
    return ok_status();
  }

  Status make_dirs(const std::string& path) override {
    std::error_code ec;
    fs::create_directories(path, ec);
    if (ec) return io_error("{}: mkdir -p failed: {}", path, ec.message());
    if (!fs::is_directory(path, ec)) return io_error("{}: exists and is not a directory", path);
    return ok_status();
  }

  StatusOr<std::vector<std::string>> list_dir(const std::string& path) override {
    std::error_code ec;
    fs::directory_iterator it(path, ec);
    if (ec) {
      if (ec == std::errc::no_such_file_or_directory)
        return not_found("{}: no such directory", path);
      return io_error("{}: listing failed: {}", path, ec.message());
    }
    std::vector<std::string> names;
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      names.push_back(it->path().filename().string());
    }
    if (ec) return io_error("{}: listing failed: {}", path, ec.message());
    std::sort(names.begin(), names.end());
    return names;
  }

  bool file_exists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  StatusOr<uint64_t> file_size(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      int err = errno;
      if (err == ENOENT) return not_found("{}: no such file", path);
      return posix_error("stat", path, err);
    }
    return static_cast<uint64_t>(st.st_size);
  }

  Status sync_dir(const std::string& path) override {
    Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (fd.get() < 0) return posix_error("open directory", path, errno);
    if (::fsync(fd.get()) != 0) return posix_error("fsync directory", path, errno);
    return ok_status();
  }

  StatusOr<uint64_t> free_bytes(const std::string& path) override {
    struct statvfs st;
    if (::statvfs(path.c_str(), &st) != 0) return posix_error("statvfs", path, errno);
    return static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
  }
};

class MemoryFile : public RandomAccessFile {
 public:
  MemoryFile(std::string_view bytes, std::string name) : bytes_(bytes), name_(std::move(name)) {}
  Status read_at(uint64_t offset, size_t n, void* dst) const override {
    if (offset > bytes_.size() || n > bytes_.size() - offset) {
      return data_loss("{}: read of {} bytes at offset {} is past the end ({} bytes)", name_, n,
                       offset, bytes_.size());
    }
    if (n > 0) std::memcpy(dst, bytes_.data() + offset, n);
    return ok_status();
  }
  uint64_t size() const override { return bytes_.size(); }
  const std::string& path() const override { return name_; }

 private:
  std::string_view bytes_;
  std::string name_;
};

std::string parent_dir(const std::string& path) {
  std::string parent = fs::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

}  // namespace

Storage* default_storage() {
  static PosixStorage storage;
  return &storage;
}

std::unique_ptr<RandomAccessFile> memory_file(std::string_view bytes, std::string name) {
  return std::make_unique<MemoryFile>(bytes, std::move(name));
}

Status write_file_atomically(Storage& storage, const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  auto attempt = [&]() -> Status {
    ZERO_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, storage.open_write(tmp));
    ZERO_RETURN_IF_ERROR(file->append(bytes));
    ZERO_RETURN_IF_ERROR(file->flush());
    ZERO_RETURN_IF_ERROR(file->sync());
    ZERO_RETURN_IF_ERROR(file->close());
    return storage.rename(tmp, path);
  };
  Status status = attempt();
  if (!status.ok()) {
    (void)storage.remove_file(tmp);  // best effort; the original error is what matters
    return status;
  }
  return storage.sync_dir(parent_dir(path));
}

StatusOr<std::string> read_file(Storage& storage, const std::string& path, uint64_t max_bytes) {
  ZERO_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, storage.open_read(path));
  if (file->size() > max_bytes) {
    return invalid_argument("{}: {} bytes, more than the {} this file may have", path, file->size(),
                            format_byte_limit(max_bytes));
  }
  std::string bytes(file->size(), '\0');
  ZERO_RETURN_IF_ERROR(file->read_at(0, bytes.size(), bytes.data()));
  return bytes;
}

// ---------------------------------------------------------------------------------------------
// FaultInjectingStorage

struct FaultInjectingStorage::State {
  struct Plan {
    int64_t counts[4] = {0, 0, 0, 0};
    int64_t fail_at[4] = {0, 0, 0, 0};  // 0: disarmed; else the count that fails
    uint64_t bytes_written = 0;
    uint64_t disk_limit = UINT64_MAX;
    int64_t short_write_at = 0;
    size_t short_write_keep = 0;
  };
  std::mutex mu;
  Plan plan;  // guarded by mu
};

namespace {

const char* fault_op_name(FaultOp op) {
  switch (op) {
    case FaultOp::kWrite: return "write";
    case FaultOp::kSync: return "fsync";
    case FaultOp::kRename: return "rename";
    case FaultOp::kRead: return "read";
  }
  return "?";
}

class FaultyRandomAccessFile : public RandomAccessFile {
 public:
  FaultyRandomAccessFile(FaultInjectingStorage* owner, std::unique_ptr<RandomAccessFile> base)
      : owner_(owner), base_(std::move(base)) {}
  Status read_at(uint64_t offset, size_t n, void* dst) const override {
    ZERO_RETURN_IF_ERROR(owner_->on_op(FaultOp::kRead, base_->path()));
    return base_->read_at(offset, n, dst);
  }
  uint64_t size() const override { return base_->size(); }
  const std::string& path() const override { return base_->path(); }

 private:
  FaultInjectingStorage* owner_;
  std::unique_ptr<RandomAccessFile> base_;
};

class FaultyWritableFile : public WritableFile {
 public:
  FaultyWritableFile(FaultInjectingStorage* owner, std::unique_ptr<WritableFile> base)
      : owner_(owner), base_(std::move(base)) {}
  Status append(const void* data, size_t n) override {
    FaultInjectingStorage::Decision d = owner_->on_write(base_->path(), n);
    if (d.allowed > 0) ZERO_RETURN_IF_ERROR(base_->append(data, d.allowed));
    return d.status;
  }
  Status write_at(uint64_t offset, const void* data, size_t n) override {
    FaultInjectingStorage::Decision d = owner_->on_write(base_->path(), n);
    if (d.allowed > 0) ZERO_RETURN_IF_ERROR(base_->write_at(offset, data, d.allowed));
    return d.status;
  }
  Status flush() override { return base_->flush(); }
  Status sync() override {
    ZERO_RETURN_IF_ERROR(owner_->on_op(FaultOp::kSync, base_->path()));
    return base_->sync();
  }
  Status close() override { return base_->close(); }
  uint64_t size() const override { return base_->size(); }
  const std::string& path() const override { return base_->path(); }

 private:
  FaultInjectingStorage* owner_;
  std::unique_ptr<WritableFile> base_;
};

}  // namespace

FaultInjectingStorage::FaultInjectingStorage(Storage* base)
    : base_(base), state_(std::make_unique<State>()) {}
FaultInjectingStorage::~FaultInjectingStorage() = default;

void FaultInjectingStorage::fail_nth(FaultOp op, int64_t n) {
  std::lock_guard<std::mutex> lock(state_->mu);
  const int i = static_cast<int>(op);
  state_->plan.fail_at[i] = state_->plan.counts[i] + n;
}

void FaultInjectingStorage::disk_full_after(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->plan.disk_limit = state_->plan.bytes_written + bytes;
}

void FaultInjectingStorage::short_write_nth(int64_t n, size_t keep_bytes) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->plan.short_write_at = state_->plan.counts[static_cast<int>(FaultOp::kWrite)] + n;
  state_->plan.short_write_keep = keep_bytes;
}

void FaultInjectingStorage::reset() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->plan = State::Plan{};
}

int64_t FaultInjectingStorage::count(FaultOp op) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->plan.counts[static_cast<int>(op)];
}

uint64_t FaultInjectingStorage::bytes_written() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->plan.bytes_written;
}

FaultInjectingStorage::Decision FaultInjectingStorage::on_write(const std::string& path, size_t n) {
  std::lock_guard<std::mutex> lock(state_->mu);
  State::Plan& s = state_->plan;
  const int64_t k = ++s.counts[static_cast<int>(FaultOp::kWrite)];
  Decision d;
  if (s.fail_at[static_cast<int>(FaultOp::kWrite)] == k) {
    d.status =
        io_error("{}: write failed: {} (injected fault, write #{})", path, errno_text(EIO), k);
    return d;
  }
  size_t allowed = n;
  if (s.short_write_at == k && s.short_write_keep < n) {
    allowed = s.short_write_keep;
    d.status = io_error("{}: short write: {} of {} bytes written (injected fault, write #{})", path,
                        allowed, n, k);
  }
  const uint64_t room = s.disk_limit > s.bytes_written ? s.disk_limit - s.bytes_written : 0;
  if (allowed > room) {
    allowed = static_cast<size_t>(room);
    d.status = io_error("{}: write failed: {} (injected: disk full after {} bytes)", path,
                        errno_text(ENOSPC), s.disk_limit);
  }
  s.bytes_written += allowed;
  d.allowed = allowed;
  return d;
}

Status FaultInjectingStorage::on_op(FaultOp op, const std::string& path) {
  std::lock_guard<std::mutex> lock(state_->mu);
  const int i = static_cast<int>(op);
  const int64_t k = ++state_->plan.counts[i];
  if (state_->plan.fail_at[i] == k) {
    return io_error("{}: {} failed: {} (injected fault, {} #{})", path, fault_op_name(op),
                    errno_text(EIO), fault_op_name(op), k);
  }
  return ok_status();
}

StatusOr<std::unique_ptr<RandomAccessFile>> FaultInjectingStorage::open_read(
    const std::string& path) {
  ZERO_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, base_->open_read(path));
  return std::unique_ptr<RandomAccessFile>(new FaultyRandomAccessFile(this, std::move(file)));
}

StatusOr<std::unique_ptr<WritableFile>> FaultInjectingStorage::open_write(const std::string& path) {
  ZERO_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, base_->open_write(path));
  return std::unique_ptr<WritableFile>(new FaultyWritableFile(this, std::move(file)));
}

Status FaultInjectingStorage::rename(const std::string& from, const std::string& to) {
  ZERO_RETURN_IF_ERROR(on_op(FaultOp::kRename, from));
  return base_->rename(from, to);
}

Status FaultInjectingStorage::exchange(const std::string& a, const std::string& b) {
  ZERO_RETURN_IF_ERROR(on_op(FaultOp::kRename, a));
  return base_->exchange(a, b);
}

Status FaultInjectingStorage::remove_file(const std::string& path) {
  return base_->remove_file(path);
}
Status FaultInjectingStorage::remove_dir(const std::string& path) {
  return base_->remove_dir(path);
}
Status FaultInjectingStorage::make_dirs(const std::string& path) { return base_->make_dirs(path); }
StatusOr<std::vector<std::string>> FaultInjectingStorage::list_dir(const std::string& path) {
  return base_->list_dir(path);
}
bool FaultInjectingStorage::file_exists(const std::string& path) {
  return base_->file_exists(path);
}
StatusOr<uint64_t> FaultInjectingStorage::file_size(const std::string& path) {
  return base_->file_size(path);
}
Status FaultInjectingStorage::sync_dir(const std::string& path) {
  ZERO_RETURN_IF_ERROR(on_op(FaultOp::kSync, path));
  return base_->sync_dir(path);
}
StatusOr<uint64_t> FaultInjectingStorage::free_bytes(const std::string& path) {
  return base_->free_bytes(path);
}

}  // namespace zero
