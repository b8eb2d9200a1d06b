// A torch.save file (the zip format of PyTorch >= 1.6) read without Python: the archive's
// `<prefix>/data.pkl` through the restricted unpickler (pickle.h), tensors from
// `<prefix>/data/<key>` with their sizes checked against the pickle's claims before any read.
// Little-endian archives only (`<prefix>/byteorder`, when present, must say "little").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "checkpoint/pickle.h"
#include "checkpoint/zip_reader.h"
#include "core/status.h"
#include "core/storage.h"

namespace zero::checkpoint {

// Largest data.pkl read (DeepSpeed's pickles are kilobytes; tensors live outside it).
inline constexpr uint64_t kMaxPickleBytes = 256ull << 20;

class TorchArchive {
 public:
  // Opens `path`: zip directory, data.pkl, every storage member present with the declared size.
  static StatusOr<std::unique_ptr<TorchArchive>> open(Storage& storage, const std::string& path);
  // The same over an open file (tests, fuzzing).
  static StatusOr<std::unique_ptr<TorchArchive>> from_file(std::unique_ptr<RandomAccessFile> file);

  const std::string& path() const { return zip_.path(); }
  const PyValue& root() const { return pickle_.root(); }

  // Reads a tensor's elements in row-major order, converted to float (float/bf16/f16/f64 and
  // integer storages). `what` names it in messages.
  Status read_f32(const PyTensor& tensor, std::vector<float>& out, const std::string& what) const;

 private:
  TorchArchive(ZipReader zip, Unpickled pickle, std::string prefix)
      : zip_(std::move(zip)), pickle_(std::move(pickle)), prefix_(std::move(prefix)) {}
  Status check_storages() const;

  ZipReader zip_;
  Unpickled pickle_;
  std::string prefix_;  // "archive/" or "<file stem>/"
};

}  // namespace zero::checkpoint
