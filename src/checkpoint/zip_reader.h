// A reader for the zip archives torch.save writes (docs/formats/deepspeed.md): stored
// (uncompressed) entries only, read in place through a RandomAccessFile. Everything a hostile
// archive could use is refused while the central directory is parsed, before any entry is read:
// compressed or encrypted entries, sizes or offsets outside the file, entries that overlap each
// other or the central directory, duplicate names, absolute names and `..` components, multi-disk
// archives. Zip64 (archives or entries past 4 GiB) is read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/storage.h"

namespace zero::checkpoint {

struct ZipEntry {
  std::string name;
  uint64_t header_offset = 0;  // of its local file header
  uint64_t data_offset = 0;    // first byte of its (stored) data
  uint64_t size_bytes = 0;
  uint32_t crc32 = 0;
};

// Thread-safe for concurrent reads (the underlying RandomAccessFile is). Movable.
class ZipReader {
 public:
  // Parses the central directory of `file` (takes ownership) and checks every entry's local
  // header. Errors are DATA_LOSS naming the file and the entry.
  static StatusOr<ZipReader> open(std::unique_ptr<RandomAccessFile> file);

  const std::string& path() const { return file_->path(); }
  const std::vector<ZipEntry>& entries() const { return entries_; }
  // nullptr if absent.
  const ZipEntry* find(std::string_view name) const;

  // Reads `n` bytes starting `offset` bytes into the entry. REQUIRES: dst holds n bytes.
  Status read(const ZipEntry& entry, uint64_t offset, uint64_t n, void* dst) const;
  // Reads a whole entry and checks its CRC-32. Refuses entries larger than `max_bytes`.
  StatusOr<std::string> read_all(const ZipEntry& entry, uint64_t max_bytes) const;

 private:
  ZipReader() = default;
  Status parse();
  Status parse_central_directory(uint64_t cd_offset, uint64_t cd_bytes, uint64_t count);
  Status check_entries(uint64_t cd_offset);

  std::unique_ptr<RandomAccessFile> file_;
  std::vector<ZipEntry> entries_;  // sorted by name
};

// CRC-32 (IEEE 802.3, zip's), continuing from `crc` (0 to start).
uint32_t crc32_update(uint32_t crc, const void* data, size_t n);

}  // namespace zero::checkpoint
