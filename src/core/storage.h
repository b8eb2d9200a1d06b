// Storage: the one seam for all file I/O (like leveldb's Env). PosixStorage is the real thing;
// FaultInjectingStorage wraps any Storage and fails the Nth write/sync/rename/read, fills the disk
// after K bytes or tears a write, so tests can prove every I/O error surfaces as a Status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace zero {

// A file opened for positional reads. Thread-safe: read_at may be called concurrently.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;

  // Reads exactly `n` bytes at `offset` into `dst` (which must hold `n` bytes). Returns DATA_LOSS
  // naming the path if the file ends before offset + n, IO_ERROR with errno text on failure.
  virtual Status read_at(uint64_t offset, size_t n, void* dst) const = 0;
  // File size in bytes when it was opened.
  virtual uint64_t size() const = 0;
  virtual const std::string& path() const = 0;
};

// A file opened for writing (created or truncated). Not thread-safe: one writer at a time.
// Destroying an unclosed file closes it without syncing.
class WritableFile {
 public:
  virtual ~WritableFile() = default;

  // Appends `n` bytes at the current end. Either all bytes are written or an error is returned
  // (the file may then hold a prefix of them).
  virtual Status append(const void* data, size_t n) = 0;
  Status append(std::string_view bytes) { return append(bytes.data(), bytes.size()); }
  // Writes `n` bytes at `offset` (may extend the file; does not move the append position unless
  // the write ends past it).
  virtual Status write_at(uint64_t offset, const void* data, size_t n) = 0;
  // Pushes any user-space buffer to the OS (PosixStorage does not buffer: a no-op there).
  virtual Status flush() = 0;
  // fsync: data and metadata are durable when this returns ok.
  virtual Status sync() = 0;
  // Closes the descriptor; further calls are errors. Idempotent on success.
  virtual Status close() = 0;
  // Bytes in the file as written through this handle (the append position).
  virtual uint64_t size() const = 0;
  virtual const std::string& path() const = 0;
};

// File-system operations. Implementations are thread-safe. Paths are plain strings; every error
// message names the path and, for OS failures, the errno text.
class Storage {
 public:
  virtual ~Storage() = default;

  virtual StatusOr<std::unique_ptr<RandomAccessFile>> open_read(const std::string& path) = 0;
  // Creates `path` or truncates it. The parent directory must exist.
  virtual StatusOr<std::unique_ptr<WritableFile>> open_write(const std::string& path) = 0;
  // Atomically replaces `to` with `from` (POSIX rename semantics).
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  // Atomically swaps two existing paths (Linux renameat2 RENAME_EXCHANGE). UNIMPLEMENTED where
  // the storage or the file system cannot; callers then fall back to two renames.
  virtual Status exchange(const std::string& a, const std::string& b) {
    return unimplemented("{} <-> {}: this storage cannot exchange paths atomically", a, b);
  }
  // Removes a file; NOT_FOUND if it does not exist.
  virtual Status remove_file(const std::string& path) = 0;
  // Removes a directory and everything under it; ok if it does not exist.
  virtual Status remove_dir(const std::string& path) = 0;
  // Creates a directory and its missing parents; ok if it exists.
  virtual Status make_dirs(const std::string& path) = 0;
  // Names (not paths) of the entries of a directory, sorted.
  virtual StatusOr<std::vector<std::string>> list_dir(const std::string& path) = 0;
  virtual bool file_exists(const std::string& path) = 0;
  virtual StatusOr<uint64_t> file_size(const std::string& path) = 0;
  // fsyncs a directory, making renames and creations inside it durable.
  virtual Status sync_dir(const std::string& path) = 0;
  // Bytes available to an unprivileged user on the file system holding `path`.
  virtual StatusOr<uint64_t> free_bytes(const std::string& path) = 0;
};

// The process-wide POSIX storage (a function-local static; stateless, so sharing it is safe).
Storage* default_storage();

// A read-only file over caller-owned memory (for parsers fed from buffers, e.g. fuzzers).
// REQUIRES: `bytes` outlives the returned file.
std::unique_ptr<RandomAccessFile> memory_file(std::string_view bytes, std::string name);

// Publishes `bytes` at `path` crash-safely: writes `path`.tmp, fsyncs it, renames it over `path`,
// fsyncs the parent directory. On error the temporary is removed (best effort) and `path` is
// untouched.
Status write_file_atomically(Storage& storage, const std::string& path, std::string_view bytes);

// Reads a whole file into a string. A file larger than `max_bytes` is refused (kInvalidArgument
// naming the path, its size and the limit) before anything is read: small metadata files (a
// checkpoint's `latest` and manifest, an index) are read with a limit, so a wrong or hostile path
// cannot exhaust memory.
StatusOr<std::string> read_file(Storage& storage, const std::string& path,
                                uint64_t max_bytes = UINT64_MAX);

// The limit for metadata files read whole (manifests, `latest`, safetensors indexes).
inline constexpr uint64_t kMaxMetadataFileBytes = uint64_t{64} << 20;

// Which operation a fault targets.
enum class FaultOp { kWrite, kSync, kRename, kRead };

// Wraps another Storage (not owned; must outlive this) and injects faults. Files it opens keep a
// pointer to it: they must not outlive it either. Counters are global to
// this object (all files) and 1-based from the last reset(). Thread-safe.
//   fail_nth(kWrite, 3): the 3rd append/write_at from now fails with IO_ERROR and writes nothing.
//   disk_full_after(K):  writes succeed until K bytes in total were written; the write crossing K
//                        writes the bytes that fit, then fails with "No space left on device".
//   short_write_nth(n, keep): the n-th write stores only its first `keep` bytes, then fails.
class FaultInjectingStorage : public Storage {
 public:
  explicit FaultInjectingStorage(Storage* base);
  ~FaultInjectingStorage() override;

  // Arms a one-shot failure of the `n`-th operation of kind `op` (n >= 1) counted from now.
  void fail_nth(FaultOp op, int64_t n);
  void disk_full_after(uint64_t bytes);
  void short_write_nth(int64_t n, size_t keep_bytes);
  // Disarms every fault and zeroes the counters.
  void reset();

  // Operations of kind `op` attempted since the last reset (failed ones included).
  int64_t count(FaultOp op) const;
  uint64_t bytes_written() const;

  StatusOr<std::unique_ptr<RandomAccessFile>> open_read(const std::string& path) override;
  StatusOr<std::unique_ptr<WritableFile>> open_write(const std::string& path) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status exchange(const std::string& a, const std::string& b) override;
  Status remove_file(const std::string& path) override;
  Status remove_dir(const std::string& path) override;
  Status make_dirs(const std::string& path) override;
  StatusOr<std::vector<std::string>> list_dir(const std::string& path) override;
  bool file_exists(const std::string& path) override;
  StatusOr<uint64_t> file_size(const std::string& path) override;
  Status sync_dir(const std::string& path) override;
  StatusOr<uint64_t> free_bytes(const std::string& path) override;

  // Used by the wrapped files; not for callers.
  struct Decision {
    Status status;       // error to return after writing `allowed` bytes (ok: write all)
    size_t allowed = 0;  // bytes to pass to the base file
  };
  Decision on_write(const std::string& path, size_t n);
  Status on_op(FaultOp op, const std::string& path);

 private:
  struct State;
  Storage* base_;
  std::unique_ptr<State> state_;
};

}  // namespace zero
