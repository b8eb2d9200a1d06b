// Our reader and writer of the safetensors format (docs/formats/safetensors.md): an 8-byte
// little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}}, then the
// data. The reader trusts nothing: every offset, size and shape is checked before use.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/storage.h"

namespace zero {

// Every dtype the format defines. Only F32/BF16/F16 convert to float; the rest can be listed and
// read as raw bytes.
enum class SafetensorsDType : uint8_t {
  kF64,
  kF32,
  kF16,
  kBF16,
  kI64,
  kI32,
  kI16,
  kI8,
  kU64,
  kU32,
  kU16,
  kU8,
  kBool,
  kF8E4M3,
  kF8E5M2,
};

std::string_view safetensors_dtype_name(SafetensorsDType dtype);  // "F32", "BOOL", ...
std::optional<SafetensorsDType> parse_safetensors_dtype(std::string_view name);
size_t safetensors_dtype_bytes(SafetensorsDType dtype);
// The compute dtype a safetensors dtype maps to, if it is one of ours.
std::optional<DType> to_dtype(SafetensorsDType dtype);
SafetensorsDType to_safetensors_dtype(DType dtype);

// One tensor's header entry. Offsets are relative to the start of the data buffer.
struct SafetensorsEntry {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // data_offsets[0]
  uint64_t end = 0;    // data_offsets[1]

  uint64_t nbytes() const { return end - begin; }
  int64_t numel() const;
};

// Largest header we accept (the reference implementation's limit is the same order).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100ull << 20;

// A parsed file: the header in memory, tensor data read on demand. Movable, not copyable.
// Thread-safe for concurrent reads (the underlying RandomAccessFile is).
class SafetensorsReader {
 public:
  // Opens `path` through `storage` and validates the header. Errors name the file and, where
  // relevant, the tensor.
  static StatusOr<SafetensorsReader> open(Storage& storage, const std::string& path);
  // Parses bytes in memory; `name` is used in messages. REQUIRES: `bytes` outlives the reader.
  static StatusOr<SafetensorsReader> from_buffer(std::string_view bytes,
                                                 std::string name = "<memory>");
  // Parses an already-open file (takes ownership).
  static StatusOr<SafetensorsReader> from_file(std::unique_ptr<RandomAccessFile> file);

  SafetensorsReader(SafetensorsReader&&) = default;
  SafetensorsReader& operator=(SafetensorsReader&&) = default;

  const std::string& path() const { return file_->path(); }
  // Entries sorted by name.
  const std::vector<SafetensorsEntry>& tensors() const { return entries_; }
  // nullptr if absent.
  const SafetensorsEntry* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // File offset of the data buffer (8 + N).
  uint64_t data_offset() const { return data_offset_; }

  // Reads the raw bytes of tensor `name`. REQUIRES: dst holds `dst_bytes` == entry nbytes.
  Status read(std::string_view name, void* dst, size_t dst_bytes) const;
  // Reads `nbytes` raw bytes starting `byte_offset` bytes into tensor `name` (for resharding).
  Status read_range(std::string_view name, uint64_t byte_offset, uint64_t nbytes, void* dst) const;
  // Reads a whole F32/BF16/F16 tensor converted to float. REQUIRES: `numel` == entry numel.
  Status read_f32(std::string_view name, float* dst, int64_t numel) const;
  // Reads elements [elem_offset, elem_offset + numel) of a F32/BF16/F16 tensor as float.
  Status read_range_f32(std::string_view name, int64_t elem_offset, int64_t numel,
                        float* dst) const;

 private:
  SafetensorsReader() = default;
  StatusOr<const SafetensorsEntry*> lookup(std::string_view name) const;

  std::unique_ptr<RandomAccessFile> file_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
  uint64_t data_offset_ = 0;
};

// Collects tensors, then writes a file. Data layout: tensors ordered by element size (largest
// first) then name, so every tensor is aligned to its element size; the header JSON has sorted
// keys and is space-padded so the data starts at a multiple of 8. Not thread-safe.
class SafetensorsWriter {
 public:
  // Called once while writing; must append exactly the tensor's nbytes to `file`.
  using StreamFn = std::function<Status(WritableFile& file)>;

  // Adds a tensor whose bytes live at `data`. REQUIRES: `data` stays valid until write().
  Status add(std::string name, SafetensorsDType dtype, std::vector<int64_t> shape,
             const void* data);
  // Adds a tensor whose bytes are produced by `stream` during write().
  Status add_streamed(std::string name, SafetensorsDType dtype, std::vector<int64_t> shape,
                      StreamFn stream);
  void set_metadata(std::string key, std::string value);

  // The header bytes (8-byte length + padded JSON) for the tensors added so far.
  StatusOr<std::string> header() const;
  // Writes the file to `path` (not atomically: publish through a temporary name yourself), then
  // fsyncs it if `sync`, then closes it.
  Status write(Storage& storage, const std::string& path, bool sync = true) const;

 private:
  struct Pending {
    SafetensorsEntry entry;
    const void* data = nullptr;
    StreamFn stream;
  };
  Status add_entry(std::string name, SafetensorsDType dtype, std::vector<int64_t> shape,
                   const void* data, StreamFn stream);
  std::vector<const Pending*> layout() const;

  std::vector<Pending> pending_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace zero
