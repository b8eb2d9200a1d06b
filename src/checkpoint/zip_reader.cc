// Zip archives of stored entries (torch.save's container), parsed defensively.
#include "checkpoint/zip_reader.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "core/crc32.h"

namespace zero::checkpoint {
namespace {

constexpr uint32_t kLocalHeaderSig = 0x04034b50;
constexpr uint32_t kCentralHeaderSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint64_t kEndBytes = 22;
constexpr uint64_t kCentralHeaderBytes = 46;
constexpr uint64_t kLocalHeaderBytes = 30;
constexpr uint64_t kMaxCommentBytes = 0xffff;
// An archive with more entries than this is not a checkpoint (torch writes one per storage).
constexpr uint64_t kMaxEntries = 1u << 20;

uint16_t le16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t le32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t le64(const unsigned char* p) {
  return static_cast<uint64_t>(le32(p)) | (static_cast<uint64_t>(le32(p + 4)) << 32);
}

// Entry names as member paths: relative, no `..`, no empty or `.` components, no backslashes or
// NUL (torch writes `<archive>/data.pkl`, `<archive>/data/0`, ...).
bool safe_member_name(std::string_view name) {
  if (name.empty() || name.front() == '/' || name.size() > 4096) return false;
  if (name.find('\0') != std::string_view::npos || name.find('\\') != std::string_view::npos) {
    return false;
  }
  size_t begin = 0;
  while (begin <= name.size()) {
    size_t end = name.find('/', begin);
    if (end == std::string_view::npos) end = name.size();
    std::string_view part = name.substr(begin, end - begin);
    if (part.empty() || part == "." || part == "..") return false;
    begin = end + 1;
  }
  return true;
}

}  // namespace

uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
  return zero::crc32_update<kCrc32Polynomial>(crc, data, n);
}

StatusOr<ZipReader> ZipReader::open(std::unique_ptr<RandomAccessFile> file) {
  ZipReader reader;
  reader.file_ = std::move(file);
  ZERO_RETURN_IF_ERROR(reader.parse());
  return reader;
}

// The end-of-central-directory record is the last 22 bytes plus a comment of up to 64 KiB: search
// backwards for its signature, then follow the zip64 locator when the 32-bit fields overflowed.
Status ZipReader::parse() {
  const uint64_t file_bytes = file_->size();
  if (file_bytes < kEndBytes) {
    return data_loss("{}: {} bytes, too short for a zip archive (truncated?)", path(), file_bytes);
  }
  const uint64_t tail_bytes = std::min(file_bytes, kEndBytes + kMaxCommentBytes);
  std::string tail(tail_bytes, '\0');
  ZERO_RETURN_IF_ERROR(file_->read_at(file_bytes - tail_bytes, tail_bytes, tail.data()));
  const auto* t = reinterpret_cast<const unsigned char*>(tail.data());
  int64_t at = -1;
  for (int64_t i = static_cast<int64_t>(tail_bytes - kEndBytes); i >= 0; --i) {
    if (le32(t + i) == kEndSig &&
        static_cast<uint64_t>(i) + kEndBytes + le16(t + i + 20) == tail_bytes) {
      at = i;
      break;
    }
  }
  if (at < 0) {
    return data_loss("{}: no zip end-of-central-directory record (not a zip archive, or truncated)",
                     path());
  }
  const unsigned char* end = t + at;
  const uint64_t end_offset = file_bytes - tail_bytes + static_cast<uint64_t>(at);
  if (le16(end + 4) != 0 || le16(end + 6) != 0 || le16(end + 8) != le16(end + 10)) {
    return data_loss("{}: a multi-disk zip archive is not supported", path());
  }
  uint64_t count = le16(end + 10);
  uint64_t cd_bytes = le32(end + 12);
  uint64_t cd_offset = le32(end + 16);
  uint64_t cd_end_limit = end_offset;
  if (count == 0xffff || cd_bytes == 0xffffffffu || cd_offset == 0xffffffffu) {
    if (end_offset < 20) return data_loss("{}: zip64 locator missing", path());
    unsigned char loc[20];
    ZERO_RETURN_IF_ERROR(file_->read_at(end_offset - 20, 20, loc));
    if (le32(loc) != kZip64LocatorSig) return data_loss("{}: zip64 locator missing", path());
    const uint64_t z64_offset = le64(loc + 8);
    if (le32(loc + 4) != 0 || le32(loc + 16) > 1) {
      return data_loss("{}: a multi-disk zip64 archive is not supported", path());
    }
    if (z64_offset > end_offset - 20 || end_offset - 20 - z64_offset < 56) {
      return data_loss("{}: zip64 end record out of bounds", path());
    }
    unsigned char z[56];
    ZERO_RETURN_IF_ERROR(file_->read_at(z64_offset, 56, z));
    if (le32(z) != kZip64EndSig) return data_loss("{}: bad zip64 end record", path());
    count = le64(z + 32);
    cd_bytes = le64(z + 40);
    cd_offset = le64(z + 48);
    cd_end_limit = z64_offset;
  }
  if (cd_offset > cd_end_limit || cd_bytes > cd_end_limit - cd_offset) {
    return data_loss("{}: central directory [{}, +{}) outside the file (truncated?)", path(),
                     cd_offset, cd_bytes);
  }
  if (count > kMaxEntries || count * kCentralHeaderBytes > cd_bytes) {
    return data_loss("{}: {} entries cannot fit a central directory of {} bytes", path(), count,
                     cd_bytes);
  }
  ZERO_RETURN_IF_ERROR(parse_central_directory(cd_offset, cd_bytes, count));
  return check_entries(cd_offset);
}

Status ZipReader::parse_central_directory(uint64_t cd_offset, uint64_t cd_bytes, uint64_t count) {
  std::string cd(cd_bytes, '\0');
  ZERO_RETURN_IF_ERROR(file_->read_at(cd_offset, cd_bytes, cd.data()));
  const auto* p = reinterpret_cast<const unsigned char*>(cd.data());
  uint64_t pos = 0;
  std::set<std::string, std::less<>> names;
  for (uint64_t i = 0; i < count; ++i) {
    if (cd_bytes - pos < kCentralHeaderBytes || le32(p + pos) != kCentralHeaderSig) {
      return data_loss("{}: central directory entry {} is malformed", path(), i);
    }
    const unsigned char* h = p + pos;
    const uint16_t flags = le16(h + 8), method = le16(h + 10);
    uint64_t comp = le32(h + 20), uncomp = le32(h + 24);
    const uint64_t name_len = le16(h + 28), extra_len = le16(h + 30), comment_len = le16(h + 32);
    uint64_t local = le32(h + 42);
    if (cd_bytes - pos - kCentralHeaderBytes < name_len + extra_len + comment_len) {
      return data_loss("{}: central directory entry {} runs past the directory", path(), i);
    }
    ZipEntry e;
    e.name.assign(reinterpret_cast<const char*>(h + kCentralHeaderBytes), name_len);
    e.crc32 = le32(h + 16);
    if (!safe_member_name(e.name)) {
      return data_loss("{}: refusing member name '{}' (absolute, '..', empty or odd characters)",
                       path(), e.name);
    }
    if (flags & 0x41) return data_loss("{}: member '{}' is encrypted", path(), e.name);
    if (method != 0) {
      return data_loss(
          "{}: member '{}' is compressed (method {}); torch.save stores entries "
          "uncompressed and only those are read",
          path(), e.name, method);
    }
    // Zip64 extended information: the 64-bit values of the fields that read 0xffffffff, in order.
    const unsigned char* x = h + kCentralHeaderBytes + name_len;
    for (uint64_t xp = 0; xp + 4 <= extra_len;) {
      const uint16_t id = le16(x + xp), len = le16(x + xp + 2);
      if (xp + 4 + len > extra_len) break;
      if (id == 0x0001) {
        uint64_t fp = xp + 4;
        auto take = [&](uint64_t& field) {
          if (field != 0xffffffffu) return true;
          if (fp + 8 > xp + 4 + len) return false;
          field = le64(x + fp);
          fp += 8;
          return true;
        };
        if (!take(uncomp) || !take(comp) || !take(local)) {
          return data_loss("{}: member '{}' has a short zip64 field", path(), e.name);
        }
      }
      xp += 4 + len;
    }
    if (comp != uncomp) {
      return data_loss("{}: member '{}' declares {} stored bytes but {} uncompressed", path(),
                       e.name, comp, uncomp);
    }
    e.size_bytes = uncomp;
    e.header_offset = local;
    if (!names.insert(e.name).second) {
      return data_loss("{}: member '{}' appears twice", path(), e.name);
    }
    entries_.push_back(std::move(e));
    pos += kCentralHeaderBytes + name_len + extra_len + comment_len;
  }
  return ok_status();
}

// Each local header must match its central entry, and the entries' [header, data end) spans must
// lie before the central directory without overlapping (a zip bomb reuses one span many times).
Status ZipReader::check_entries(uint64_t cd_offset) {
  for (ZipEntry& e : entries_) {
    if (e.header_offset > cd_offset || cd_offset - e.header_offset < kLocalHeaderBytes) {
      return data_loss("{}: member '{}' header at {} is outside the data area", path(), e.name,
                       e.header_offset);
    }
    unsigned char h[kLocalHeaderBytes];
    ZERO_RETURN_IF_ERROR(file_->read_at(e.header_offset, kLocalHeaderBytes, h));
    if (le32(h) != kLocalHeaderSig) {
      return data_loss("{}: member '{}' has no local header at {}", path(), e.name,
                       e.header_offset);
    }
    const uint64_t name_len = le16(h + 26), extra_len = le16(h + 28);
    const uint64_t data = e.header_offset + kLocalHeaderBytes + name_len + extra_len;
    if (data > cd_offset || e.size_bytes > cd_offset - data) {
      return data_loss(
          "{}: member '{}' ({} bytes at {}) runs past the data area (truncated, or "
          "a size that is a lie)",
          path(), e.name, e.size_bytes, data);
    }
    std::string local_name(name_len, '\0');
    ZERO_RETURN_IF_ERROR(
        file_->read_at(e.header_offset + kLocalHeaderBytes, name_len, local_name.data()));
    if (local_name != e.name) {
      return data_loss("{}: member '{}': local header names '{}'", path(), e.name, local_name);
    }
    e.data_offset = data;
  }
  std::vector<const ZipEntry*> by_offset;
  for (const ZipEntry& e : entries_) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const ZipEntry* a, const ZipEntry* b) {
    return a->header_offset < b->header_offset;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const ZipEntry& prev = *by_offset[i - 1];
    if (prev.data_offset + prev.size_bytes > by_offset[i]->header_offset) {
      return data_loss("{}: members '{}' and '{}' overlap", path(), prev.name, by_offset[i]->name);
    }
  }
  std::sort(entries_.begin(), entries_.end(),
            [](const ZipEntry& a, const ZipEntry& b) { return a.name < b.name; });
  return ok_status();
}

const ZipEntry* ZipReader::find(std::string_view name) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                             [](const ZipEntry& e, std::string_view n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

Status ZipReader::read(const ZipEntry& entry, uint64_t offset, uint64_t n, void* dst) const {
  if (offset > entry.size_bytes || n > entry.size_bytes - offset) {
    return data_loss("{}: read of [{}, +{}) past member '{}' ({} bytes)", path(), offset, n,
                     entry.name, entry.size_bytes);
  }
  return file_->read_at(entry.data_offset + offset, n, dst);
}

StatusOr<std::string> ZipReader::read_all(const ZipEntry& entry, uint64_t max_bytes) const {
  if (entry.size_bytes > max_bytes) {
    return data_loss("{}: member '{}' is {} bytes, more than the {} accepted", path(), entry.name,
                     entry.size_bytes, max_bytes);
  }
  std::string bytes(entry.size_bytes, '\0');
  ZERO_RETURN_IF_ERROR(read(entry, 0, entry.size_bytes, bytes.data()));
  if (crc32_update(0, bytes.data(), bytes.size()) != entry.crc32) {
    return data_loss("{}: member '{}' fails its CRC-32 check (corrupted)", path(), entry.name);
  }
  return bytes;
}

}  // namespace zero::checkpoint
