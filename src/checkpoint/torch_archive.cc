// torch.save zip archives: the directory, the pickle and the storages, each checked before use.
#include "checkpoint/torch_archive.h"

#include <cstring>

#include "core/dtype.h"

namespace zero::checkpoint {
namespace {

// One element of a storage as float.
float element_to_float(const char* p, TorchDType dtype) {
  switch (dtype) {
    case TorchDType::kF32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case TorchDType::kF64: {
      double v;
      std::memcpy(&v, p, 8);
      return static_cast<float>(v);
    }
    case TorchDType::kBF16: {
      bf16 v;
      std::memcpy(&v.bits, p, 2);
      return bf16_to_float(v);
    }
    case TorchDType::kF16: {
      f16 v;
      std::memcpy(&v.bits, p, 2);
      return f16_to_float(v);
    }
    case TorchDType::kI64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<float>(v);
    }
    case TorchDType::kI32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return static_cast<float>(v);
    }
    case TorchDType::kI16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return static_cast<float>(v);
    }
    case TorchDType::kI8: return static_cast<float>(static_cast<int8_t>(*p));
    case TorchDType::kU8:
    case TorchDType::kBool: return static_cast<float>(static_cast<uint8_t>(*p));
  }
  return 0;
}

}  // namespace

StatusOr<std::unique_ptr<TorchArchive>> TorchArchive::open(Storage& storage,
                                                           const std::string& path) {
  ZERO_ASSIGN_OR_RETURN(auto file, storage.open_read(path));
  return from_file(std::move(file));
}

// torch.save puts every member under one top-level folder (the file's stem, or "archive").
StatusOr<std::unique_ptr<TorchArchive>> TorchArchive::from_file(
    std::unique_ptr<RandomAccessFile> file) {
  ZERO_ASSIGN_OR_RETURN(ZipReader zip, ZipReader::open(std::move(file)));
  const ZipEntry* pkl = nullptr;
  for (const ZipEntry& e : zip.entries()) {
    const size_t slash = e.name.find('/');
    if (slash != std::string::npos && e.name.substr(slash + 1) == "data.pkl") {
      if (pkl) return data_loss("{}: more than one data.pkl", zip.path());
      pkl = &e;
    }
  }
  if (!pkl) {
    return data_loss(
        "{}: no <archive>/data.pkl member: not a torch.save file of PyTorch >= 1.6 "
        "(the legacy tar / raw-pickle format is not read)",
        zip.path());
  }
  std::string prefix = pkl->name.substr(0, pkl->name.find('/') + 1);
  for (const ZipEntry& e : zip.entries()) {
    if (e.name.compare(0, prefix.size(), prefix) != 0) {
      return data_loss("{}: member '{}' is outside the archive folder '{}'", zip.path(), e.name,
                       prefix);
    }
  }
  if (const ZipEntry* order = zip.find(prefix + "byteorder")) {
    ZERO_ASSIGN_OR_RETURN(std::string text, zip.read_all(*order, 64));
    if (text != "little") {
      return unimplemented("{}: byteorder '{}': only little-endian archives are read", zip.path(),
                           text);
    }
  }
  ZERO_ASSIGN_OR_RETURN(std::string bytes, zip.read_all(*pkl, kMaxPickleBytes));
  ZERO_ASSIGN_OR_RETURN(Unpickled pickle, unpickle(bytes, zip.path() + ":" + pkl->name));
  std::unique_ptr<TorchArchive> archive(
      new TorchArchive(std::move(zip), std::move(pickle), std::move(prefix)));
  ZERO_RETURN_IF_ERROR(archive->check_storages());
  return archive;
}

// Every storage the pickle names must be a member of exactly numel * element-size bytes: the
// tensors' bounds were checked against numel, so this bounds every read by the file.
Status TorchArchive::check_storages() const {
  for (const PyStorage* s : pickle_.storages()) {
    const ZipEntry* e = zip_.find(prefix_ + "data/" + s->key);
    if (!e) return data_loss("{}: storage '{}' has no member data/{}", path(), s->key, s->key);
    uint64_t want = 0;
    if (__builtin_mul_overflow(static_cast<uint64_t>(s->numel),
                               static_cast<uint64_t>(torch_dtype_bytes(s->dtype)), &want) ||
        want != e->size_bytes) {
      return data_loss("{}: storage '{}' declares {} {} elements but its member holds {} bytes",
                       path(), s->key, s->numel, torch_dtype_name(s->dtype), e->size_bytes);
    }
  }
  return ok_status();
}

Status TorchArchive::read_f32(const PyTensor& t, std::vector<float>& out,
                              const std::string& what) const {
  const ZipEntry* e = zip_.find(prefix_ + "data/" + t.storage->key);
  if (!e) return internal_error("{}: storage '{}' vanished", path(), t.storage->key);
  const int64_t numel = t.numel();
  out.resize(static_cast<size_t>(numel));
  if (numel == 0) return ok_status();
  // A row-major fp32 view (DeepSpeed's flat partitions and moments): read straight into `out`,
  // so a large tensor is held once, not also as raw bytes.
  bool row_major = true;
  for (size_t d = t.shape.size(), expect = 1; d-- > 0;) {
    if (t.shape[d] != 1 && t.stride[d] != static_cast<int64_t>(expect)) row_major = false;
    expect *= static_cast<size_t>(t.shape[d]);
  }
  if (row_major && t.storage->dtype == TorchDType::kF32) {
    Status s = zip_.read(*e, static_cast<uint64_t>(t.offset) * sizeof(float),
                         static_cast<uint64_t>(numel) * sizeof(float), out.data());
    return s.ok() ? s : s.with_context(what);
  }
  // Read the span the view touches (bounded by the storage, checked when the tensor was built),
  // then gather in row-major order.
  int64_t last = t.offset;
  for (size_t d = 0; d < t.shape.size(); ++d) last += (t.shape[d] - 1) * t.stride[d];
  const uint64_t elem = static_cast<uint64_t>(torch_dtype_bytes(t.storage->dtype));
  const uint64_t span = static_cast<uint64_t>(last - t.offset + 1);
  std::string bytes(span * elem, '\0');
  Status s = zip_.read(*e, static_cast<uint64_t>(t.offset) * elem, bytes.size(), bytes.data());
  if (!s.ok()) return s.with_context(what);
  std::vector<int64_t> index(t.shape.size(), 0);
  for (int64_t k = 0; k < numel; ++k) {
    int64_t at = 0;
    for (size_t d = 0; d < index.size(); ++d) at += index[d] * t.stride[d];
    out[static_cast<size_t>(k)] =
        element_to_float(bytes.data() + at * static_cast<int64_t>(elem), t.storage->dtype);
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < t.shape[d]) break;
      index[d] = 0;
    }
  }
  return ok_status();
}

}  // namespace zero::checkpoint
