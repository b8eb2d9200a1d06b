// A restricted pickle interpreter for torch.save's data.pkl (docs/formats/deepspeed.md). It runs
// the opcodes of protocols 2-4 that torch.save and DeepSpeed's checkpoints emit and builds plain
// values: None, bool, int, float, str, bytes, tuple, list, dict, tensors (torch._utils rebuilds
// over persistent-id storages) and a few allowlisted objects (DeepSpeed's loss scalers, enums,
// fragment addresses) as a class name plus attributes. Nothing is ever called or imported: a global
// outside the allowlist is refused by its module.name before anything uses it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace zero::checkpoint {

// The element types of torch's typed storages that we read.
enum class TorchDType { kF32, kF64, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };
int torch_dtype_bytes(TorchDType dtype);
const char* torch_dtype_name(TorchDType dtype);

// A storage named by a persistent id: ('storage', torch.<T>Storage, key, location, numel).
struct PyStorage {
  TorchDType dtype = TorchDType::kF32;
  std::string key;    // the archive member data/<key>
  int64_t numel = 0;  // elements, as declared in the pickle (checked against the member size)
};

struct PyValue;

// A tensor view of a storage; its bounds were checked against the declared storage numel.
struct PyTensor {
  const PyStorage* storage = nullptr;
  int64_t offset = 0;  // in elements
  std::vector<int64_t> shape;
  std::vector<int64_t> stride;
  int64_t numel() const;
};

enum class PyKind {
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kBytes,
  kTuple,
  kList,
  kDict,
  kTensor,
  kStorage,
  kGlobal,
  kObject,
};

struct PyValue {
  PyKind kind = PyKind::kNone;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                // str, bytes, a global's "module.name", an object's class
  std::vector<PyValue*> items;  // tuple / list elements
  std::vector<std::pair<PyValue*, PyValue*>> dict;  // dict items; an object's attributes
  PyTensor tensor;
  PyStorage storage;

  bool is_none() const { return kind == PyKind::kNone; }
  bool is_sequence() const { return kind == PyKind::kTuple || kind == PyKind::kList; }
  // Dict (or object attribute) lookup by str / int key; nullptr when absent or not a dict.
  const PyValue* get(std::string_view key) const;
  const PyValue* get(int64_t key) const;
  // For messages: "dict", "tensor", "object deepspeed...LossScaler", ...
  std::string type_name() const;
};

// The result of unpickling: owns every value (values may be shared and even cyclic through the
// memo, so they live in one arena and are referenced by pointer). Movable.
class Unpickled {
 public:
  const PyValue& root() const { return *root_; }
  // The storages the pickle referenced, in first-use order (each key once).
  const std::vector<const PyStorage*>& storages() const { return storages_; }

 private:
  friend class Unpickler;
  std::vector<std::unique_ptr<PyValue>> arena_;
  std::vector<const PyStorage*> storages_;
  const PyValue* root_ = nullptr;
};

// Limits that bound the interpreter's memory by its input, whatever the input claims.
struct UnpickleLimits {
  uint64_t max_values = 50'000'000;
  uint64_t max_memo_index = 50'000'000;
};

// Runs `bytes` (a data.pkl) and returns its value. `name` is used in messages. Errors:
// INVALID_ARGUMENT for a refused global or opcode (naming it and the byte offset), DATA_LOSS for
// a malformed stream.
StatusOr<Unpickled> unpickle(std::string_view bytes, const std::string& name,
                             const UnpickleLimits& limits = {});

}  // namespace zero::checkpoint
