// Safetensors parsing (bounds-checked, no exceptions escape) and writing.
#include "core/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

namespace zero {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little endian");

namespace {

using json = nlohmann::json;

struct DTypeInfo {
  SafetensorsDType dtype;
  std::string_view name;
  size_t bytes;
};

constexpr DTypeInfo kDTypes[] = {
    {SafetensorsDType::kF64, "F64", 8},        {SafetensorsDType::kF32, "F32", 4},
    {SafetensorsDType::kF16, "F16", 2},        {SafetensorsDType::kBF16, "BF16", 2},
    {SafetensorsDType::kI64, "I64", 8},        {SafetensorsDType::kI32, "I32", 4},
    {SafetensorsDType::kI16, "I16", 2},        {SafetensorsDType::kI8, "I8", 1},
    {SafetensorsDType::kU64, "U64", 8},        {SafetensorsDType::kU32, "U32", 4},
    {SafetensorsDType::kU16, "U16", 2},        {SafetensorsDType::kU8, "U8", 1},
    {SafetensorsDType::kBool, "BOOL", 1},      {SafetensorsDType::kF8E4M3, "F8_E4M3", 1},
    {SafetensorsDType::kF8E5M2, "F8_E5M2", 1},
};

const DTypeInfo& info(SafetensorsDType dtype) {
  for (const DTypeInfo& i : kDTypes) {
    if (i.dtype == dtype) return i;
  }
  return kDTypes[1];  // unreachable: every enumerator is in the table
}

// numel and nbytes of a shape, or nullopt on a negative dim or overflow past 2^63.
std::optional<uint64_t> checked_nbytes(const std::vector<int64_t>& shape, size_t elem_bytes) {
  uint64_t n = elem_bytes;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  }
  if (n > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return n;
}

std::optional<uint64_t> as_u64(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

Status parse_entry(const std::string& path, const std::string& name, const json& v,
                   uint64_t buffer_bytes, SafetensorsEntry* out) {
  auto bad = [&](std::string_view why) {
    return invalid_argument("{}: tensor '{}': {}", path, name, why);
  };
  if (!v.is_object()) return bad("header entry is not a JSON object");
  auto dtype_it = v.find("dtype");
  auto shape_it = v.find("shape");
  auto offsets_it = v.find("data_offsets");
  if (dtype_it == v.end() || !dtype_it->is_string()) return bad("missing or non-string 'dtype'");
  if (shape_it == v.end() || !shape_it->is_array()) return bad("missing or non-array 'shape'");
  if (offsets_it == v.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    return bad("'data_offsets' must be an array [begin, end]");
  }
  const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
  std::optional<SafetensorsDType> dtype = parse_safetensors_dtype(dtype_name);
  if (!dtype) return bad(fmt::format("unknown dtype '{}'", dtype_name));
  out->name = name;
  out->dtype = *dtype;
  out->shape.clear();
  if (shape_it->size() > 64) return bad("shape has more than 64 dimensions");
  for (const json& d : *shape_it) {
    std::optional<uint64_t> dim = as_u64(d);
    if (!dim || *dim > static_cast<uint64_t>(INT64_MAX)) {
      return bad("shape dimensions must be non-negative integers");
    }
    out->shape.push_back(static_cast<int64_t>(*dim));
  }
  std::optional<uint64_t> begin = as_u64((*offsets_it)[0]);
  std::optional<uint64_t> end = as_u64((*offsets_it)[1]);
  if (!begin || !end) return bad("data_offsets must be non-negative integers");
  if (*begin > *end) return bad(fmt::format("data_offsets [{}, {}] are reversed", *begin, *end));
  if (*end > buffer_bytes) {
    return data_loss(
        "{}: tensor '{}': data_offsets [{}, {}] run past the data buffer ({} bytes); "
        "truncated file?",
        path, name, *begin, *end, buffer_bytes);
  }
  std::optional<uint64_t> nbytes = checked_nbytes(out->shape, info(*dtype).bytes);
  if (!nbytes) return bad("shape is too large (element count overflows)");
  if (*nbytes != *end - *begin) {
    return bad(fmt::format("shape x dtype is {} bytes but data_offsets [{}, {}] span {}", *nbytes,
                           *begin, *end, *end - *begin));
  }
  out->begin = *begin;
  out->end = *end;
  return ok_status();
}

}  // namespace

std::string_view safetensors_dtype_name(SafetensorsDType dtype) { return info(dtype).name; }

std::optional<SafetensorsDType> parse_safetensors_dtype(std::string_view name) {
  for (const DTypeInfo& i : kDTypes) {
    if (i.name == name) return i.dtype;
  }
  return std::nullopt;
}

size_t safetensors_dtype_bytes(SafetensorsDType dtype) { return info(dtype).bytes; }

std::optional<DType> to_dtype(SafetensorsDType dtype) {
  switch (dtype) {
    case SafetensorsDType::kF32: return DType::kF32;
    case SafetensorsDType::kBF16: return DType::kBF16;
    case SafetensorsDType::kF16: return DType::kF16;
    default: return std::nullopt;
  }
}

SafetensorsDType to_safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return SafetensorsDType::kF32;
    case DType::kBF16: return SafetensorsDType::kBF16;
    case DType::kF16: return SafetensorsDType::kF16;
  }
  return SafetensorsDType::kF32;
}

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated not to overflow at parse time
  return n;
}

// ---------------------------------------------------------------------------------------------
// Reader

StatusOr<SafetensorsReader> SafetensorsReader::open(Storage& storage, const std::string& path) {
  ZERO_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, storage.open_read(path));
  return from_file(std::move(file));
}

StatusOr<SafetensorsReader> SafetensorsReader::from_buffer(std::string_view bytes,
                                                           std::string name) {
  return from_file(memory_file(bytes, std::move(name)));
}

StatusOr<SafetensorsReader> SafetensorsReader::from_file(std::unique_ptr<RandomAccessFile> file) {
  const std::string path = file->path();
  const uint64_t file_bytes = file->size();
  if (file_bytes < 8) {
    return data_loss("{}: not a safetensors file: {} bytes, shorter than the 8-byte header length",
                     path, file_bytes);
  }
  uint8_t len_bytes[8];
  ZERO_RETURN_IF_ERROR(file->read_at(0, 8, len_bytes));
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | len_bytes[i];
  if (header_bytes > kSafetensorsMaxHeaderBytes) {
    return invalid_argument(
        "{}: header length {} exceeds the {} byte limit; not a safetensors file?", path,
        header_bytes, kSafetensorsMaxHeaderBytes);
  }
  if (header_bytes > file_bytes - 8) {
    return data_loss("{}: header length {} exceeds the {} bytes after the length field; truncated?",
                     path, header_bytes, file_bytes - 8);
  }
  if (header_bytes < 2)
    return invalid_argument("{}: header of {} bytes is too short", path, header_bytes);
  std::string text(header_bytes, '\0');
  ZERO_RETURN_IF_ERROR(file->read_at(8, text.size(), text.data()));
  if (text[0] != '{') return invalid_argument("{}: header does not start with '{{'", path);

  // Duplicate top-level keys would silently shadow each other in the DOM: reject them.
  std::set<std::string> seen;
  std::string duplicate;
  json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      if (!seen.insert(parsed.get<std::string>()).second && duplicate.empty()) {
        duplicate = parsed.get<std::string>();
      }
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text, on_event, /*allow_exceptions=*/true);
  } catch (const json::exception& e) {
    return invalid_argument("{}: header is not valid JSON: {}", path, e.what());
  }
  if (!header.is_object()) return invalid_argument("{}: header JSON is not an object", path);
  if (!duplicate.empty()) {
    return invalid_argument("{}: header names '{}' twice", path, duplicate);
  }

  SafetensorsReader reader;
  reader.data_offset_ = 8 + header_bytes;
  const uint64_t buffer_bytes = file_bytes - reader.data_offset_;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) {
        return invalid_argument("{}: '__metadata__' must be an object of strings", path);
      }
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) {
          return invalid_argument("{}: '__metadata__' value for '{}' is not a string", path,
                                  m.key());
        }
        reader.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    SafetensorsEntry entry;
    ZERO_RETURN_IF_ERROR(parse_entry(path, it.key(), it.value(), buffer_bytes, &entry));
    reader.entries_.push_back(std::move(entry));
  }
  // nlohmann's object is a std::map, so entries_ is already sorted by name; check overlaps in
  // offset order (empty tensors occupy nothing and never overlap).
  std::vector<const SafetensorsEntry*> by_offset;
  for (const SafetensorsEntry& e : reader.entries_) {
    if (e.nbytes() > 0) by_offset.push_back(&e);
  }
  std::sort(
      by_offset.begin(), by_offset.end(),
      [](const SafetensorsEntry* a, const SafetensorsEntry* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      return invalid_argument("{}: tensors '{}' and '{}' overlap in the data buffer", path,
                              by_offset[i - 1]->name, by_offset[i]->name);
    }
  }
  reader.file_ = std::move(file);
  return reader;
}

const SafetensorsEntry* SafetensorsReader::find(std::string_view name) const {
  auto it =
      std::lower_bound(entries_.begin(), entries_.end(), name,
                       [](const SafetensorsEntry& e, std::string_view n) { return e.name < n; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

StatusOr<const SafetensorsEntry*> SafetensorsReader::lookup(std::string_view name) const {
  const SafetensorsEntry* e = find(name);
  if (e == nullptr) return not_found("{}: no tensor named '{}'", path(), name);
  return e;
}

Status SafetensorsReader::read(std::string_view name, void* dst, size_t dst_bytes) const {
  ZERO_ASSIGN_OR_RETURN(const SafetensorsEntry* e, lookup(name));
  if (dst_bytes != e->nbytes()) {
    return invalid_argument("{}: tensor '{}' has {} bytes, destination holds {}", path(), name,
                            e->nbytes(), dst_bytes);
  }
  return read_range(name, 0, dst_bytes, dst);
}

Status SafetensorsReader::read_range(std::string_view name, uint64_t byte_offset, uint64_t nbytes,
                                     void* dst) const {
  ZERO_ASSIGN_OR_RETURN(const SafetensorsEntry* e, lookup(name));
  if (byte_offset > e->nbytes() || nbytes > e->nbytes() - byte_offset) {
    return invalid_argument("{}: tensor '{}': byte range [{}, +{}) is outside its {} bytes", path(),
                            name, byte_offset, nbytes, e->nbytes());
  }
  Status s = file_->read_at(data_offset_ + e->begin + byte_offset, nbytes, dst);
  if (!s.ok()) return s.with_context(fmt::format("tensor '{}'", name));
  return ok_status();
}

Status SafetensorsReader::read_f32(std::string_view name, float* dst, int64_t numel) const {
  ZERO_ASSIGN_OR_RETURN(const SafetensorsEntry* e, lookup(name));
  if (numel != e->numel()) {
    return invalid_argument("{}: tensor '{}' has {} elements, destination holds {}", path(), name,
                            e->numel(), numel);
  }
  return read_range_f32(name, 0, numel, dst);
}

Status SafetensorsReader::read_range_f32(std::string_view name, int64_t elem_offset, int64_t numel,
                                         float* dst) const {
  ZERO_ASSIGN_OR_RETURN(const SafetensorsEntry* e, lookup(name));
  std::optional<DType> dtype = to_dtype(e->dtype);
  if (!dtype) {
    return unimplemented("{}: tensor '{}' is {}; only F32, BF16 and F16 convert to float", path(),
                         name, safetensors_dtype_name(e->dtype));
  }
  if (elem_offset < 0 || numel < 0 || elem_offset > e->numel() ||
      numel > e->numel() - elem_offset) {
    return invalid_argument("{}: tensor '{}': element range [{}, +{}) is outside its {} elements",
                            path(), name, elem_offset, numel, e->numel());
  }
  const size_t esize = dtype_bytes(*dtype);
  if (*dtype == DType::kF32) {
    return read_range(name, static_cast<uint64_t>(elem_offset) * 4,
                      static_cast<uint64_t>(numel) * 4, dst);
  }
  // 16-bit: read in chunks into a staging buffer, widen each chunk.
  constexpr int64_t kChunk = 1 << 20;
  std::vector<uint16_t> staging(static_cast<size_t>(std::min(numel, kChunk)));
  for (int64_t done = 0; done < numel; done += kChunk) {
    const int64_t n = std::min(kChunk, numel - done);
    ZERO_RETURN_IF_ERROR(read_range(name, static_cast<uint64_t>(elem_offset + done) * esize,
                                    static_cast<uint64_t>(n) * esize, staging.data()));
    convert_to_f32(staging.data(), *dtype, dst + done, static_cast<size_t>(n));
  }
  return ok_status();
}

// ---------------------------------------------------------------------------------------------
// Writer

Status SafetensorsWriter::add_entry(std::string name, SafetensorsDType dtype,
                                    std::vector<int64_t> shape, const void* data, StreamFn stream) {
  if (name == "__metadata__") return invalid_argument("'__metadata__' is not a valid tensor name");
  for (const Pending& p : pending_) {
    if (p.entry.name == name) return invalid_argument("tensor '{}' added twice", name);
  }
  std::optional<uint64_t> nbytes = checked_nbytes(shape, safetensors_dtype_bytes(dtype));
  if (!nbytes) return invalid_argument("tensor '{}': invalid or overflowing shape", name);
  Pending p;
  p.entry.name = std::move(name);
  p.entry.dtype = dtype;
  p.entry.shape = std::move(shape);
  p.entry.end = *nbytes;  // begin/end are assigned by layout order in header()
  p.data = data;
  p.stream = std::move(stream);
  pending_.push_back(std::move(p));
  return ok_status();
}

Status SafetensorsWriter::add(std::string name, SafetensorsDType dtype, std::vector<int64_t> shape,
                              const void* data) {
  return add_entry(std::move(name), dtype, std::move(shape), data, nullptr);
}

Status SafetensorsWriter::add_streamed(std::string name, SafetensorsDType dtype,
                                       std::vector<int64_t> shape, StreamFn stream) {
  return add_entry(std::move(name), dtype, std::move(shape), nullptr, std::move(stream));
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

std::vector<const SafetensorsWriter::Pending*> SafetensorsWriter::layout() const {
  std::vector<const Pending*> order;
  for (const Pending& p : pending_) order.push_back(&p);
  std::sort(order.begin(), order.end(), [](const Pending* a, const Pending* b) {
    size_t ea = safetensors_dtype_bytes(a->entry.dtype),
           eb = safetensors_dtype_bytes(b->entry.dtype);
    if (ea != eb) return ea > eb;
    return a->entry.name < b->entry.name;
  });
  return order;
}

StatusOr<std::string> SafetensorsWriter::header() const {
  json header = json::object();
  uint64_t offset = 0;
  for (const Pending* p : layout()) {
    const uint64_t nbytes = p->entry.end;
    json shape = json::array();
    for (int64_t d : p->entry.shape) shape.push_back(d);
    header[p->entry.name] = {{"dtype", std::string(safetensors_dtype_name(p->entry.dtype))},
                             {"shape", std::move(shape)},
                             {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {  // e.g. a name that is not valid UTF-8
    return invalid_argument("safetensors header cannot be encoded: {}", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + text;
}

Status SafetensorsWriter::write(Storage& storage, const std::string& path, bool sync) const {
  ZERO_ASSIGN_OR_RETURN(std::string head, header());
  ZERO_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, storage.open_write(path));
  ZERO_RETURN_IF_ERROR(file->append(head));
  for (const Pending* p : layout()) {
    const uint64_t nbytes = p->entry.end;
    if (p->stream) {
      const uint64_t before = file->size();
      ZERO_RETURN_IF_ERROR(p->stream(*file));
      if (file->size() - before != nbytes) {
        return internal_error("{}: tensor '{}': stream wrote {} bytes, expected {}", path,
                              p->entry.name, file->size() - before, nbytes);
      }
    } else if (nbytes > 0) {
      ZERO_RETURN_IF_ERROR(file->append(p->data, nbytes));
    }
  }
  ZERO_RETURN_IF_ERROR(file->flush());
  if (sync) ZERO_RETURN_IF_ERROR(file->sync());
  return file->close();
}

}  // namespace zero
