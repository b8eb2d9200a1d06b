// The restricted pickle interpreter: a stack machine over arena values, no code execution.
#include "checkpoint/pickle.h"

#include <cstring>
#include <limits>
#include <unordered_map>

#include <fmt/ranges.h>

namespace zero::checkpoint {
namespace {

struct StorageType {
  const char* global;
  TorchDType dtype;
};
constexpr StorageType kStorageTypes[] = {
    {"torch.FloatStorage", TorchDType::kF32}, {"torch.DoubleStorage", TorchDType::kF64},
    {"torch.HalfStorage", TorchDType::kF16},  {"torch.BFloat16Storage", TorchDType::kBF16},
    {"torch.LongStorage", TorchDType::kI64},  {"torch.IntStorage", TorchDType::kI32},
    {"torch.ShortStorage", TorchDType::kI16}, {"torch.CharStorage", TorchDType::kI8},
    {"torch.ByteStorage", TorchDType::kU8},   {"torch.BoolStorage", TorchDType::kBool},
};

// Globals that REDUCE may "call": each is interpreted below, never looked up or run.
constexpr const char* kFunctions[] = {
    "torch._utils._rebuild_tensor_v2",
    "torch._utils._rebuild_parameter",
    "torch._tensor._rebuild_from_type_v2",
    "collections.OrderedDict",
    "torch.Size",
    "builtins.set",
    "builtins.frozenset",
    "_codecs.encode",
    "torch.device",
    "copyreg._reconstructor",
    "builtins.getattr",
};
// Classes DeepSpeed's checkpoints hold as objects: built as a class name plus attributes (their
// state dict from BUILD, or the constructor arguments of an enum under "value").
constexpr const char* kClasses[] = {
    "deepspeed.runtime.fp16.loss_scaler.LossScaler",
    "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
    "deepspeed.runtime.zero.config.ZeroStageEnum",
    "deepspeed.runtime.zero.offload_config.OffloadDeviceEnum",
    "deepspeed.utils.tensor_fragment.fragment_address",
    "deepspeed.runtime.config.DtypeEnum",
    "torch.Tensor",
    "torch.nn.parameter.Parameter",
    "builtins.object",
};
// Plain values behind a global (torch dtypes pickle as torch.<name>).
constexpr const char* kConstants[] = {"torch.float32", "torch.float16", "torch.bfloat16",
                                      "torch.float64", "torch.int64",   "torch.int32",
                                      "torch.uint8",   "torch.bool"};

template <size_t N>
bool listed(const char* const (&list)[N], std::string_view name) {
  for (const char* s : list)
    if (name == s) return true;
  return false;
}

const StorageType* storage_type(std::string_view name) {
  for (const StorageType& t : kStorageTypes)
    if (name == t.global) return &t;
  return nullptr;
}

}  // namespace

int torch_dtype_bytes(TorchDType d) {
  switch (d) {
    case TorchDType::kF64:
    case TorchDType::kI64: return 8;
    case TorchDType::kF32:
    case TorchDType::kI32: return 4;
    case TorchDType::kF16:
    case TorchDType::kBF16:
    case TorchDType::kI16: return 2;
    default: return 1;
  }
}

const char* torch_dtype_name(TorchDType d) {
  switch (d) {
    case TorchDType::kF32: return "float32";
    case TorchDType::kF64: return "float64";
    case TorchDType::kF16: return "float16";
    case TorchDType::kBF16: return "bfloat16";
    case TorchDType::kI64: return "int64";
    case TorchDType::kI32: return "int32";
    case TorchDType::kI16: return "int16";
    case TorchDType::kI8: return "int8";
    case TorchDType::kU8: return "uint8";
    case TorchDType::kBool: return "bool";
  }
  return "?";
}

int64_t PyTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // bounded: checked against the storage when built
  return n;
}

const PyValue* PyValue::get(std::string_view key) const {
  if (kind != PyKind::kDict && kind != PyKind::kObject) return nullptr;
  for (const auto& [k, v] : dict)
    if (k->kind == PyKind::kString && k->s == key) return v;
  return nullptr;
}

const PyValue* PyValue::get(int64_t key) const {
  if (kind != PyKind::kDict) return nullptr;
  for (const auto& [k, v] : dict)
    if (k->kind == PyKind::kInt && k->i == key) return v;
  return nullptr;
}

std::string PyValue::type_name() const {
  switch (kind) {
    case PyKind::kNone: return "None";
    case PyKind::kBool: return "bool";
    case PyKind::kInt: return "int";
    case PyKind::kFloat: return "float";
    case PyKind::kString: return "str";
    case PyKind::kBytes: return "bytes";
    case PyKind::kTuple: return "tuple";
    case PyKind::kList: return "list";
    case PyKind::kDict: return "dict";
    case PyKind::kTensor: return "tensor";
    case PyKind::kStorage: return "storage";
    case PyKind::kGlobal: return "global " + s;
    case PyKind::kObject: return "object " + s;
  }
  return "?";
}

// The interpreter. One instance per unpickle() call.
class Unpickler {
 public:
  Unpickler(std::string_view bytes, const std::string& name, const UnpickleLimits& limits)
      : in_(bytes), name_(name), limits_(limits) {}
  StatusOr<Unpickled> run();

 private:
  template <typename... Args>
  Status bad(fmt::format_string<Args...> f, Args&&... args) {
    return data_loss("{}: pickle byte {}: {}", name_, op_at_,
                     fmt::format(f, std::forward<Args>(args)...));
  }
  template <typename... Args>
  Status refuse(fmt::format_string<Args...> f, Args&&... args) {
    return invalid_argument("{}: pickle byte {}: {}", name_, op_at_,
                            fmt::format(f, std::forward<Args>(args)...));
  }
  StatusOr<PyValue*> make(PyKind kind);
  Status charge_copy(size_t n);
  Status take(size_t n, std::string_view& out);
  StatusOr<uint64_t> uint_le(size_t n);
  StatusOr<PyValue*> pop();
  StatusOr<std::vector<PyValue*>> pop_mark();
  StatusOr<PyValue*> top();
  Status op_scalar(uint8_t op, bool& handled);
  Status op_container(uint8_t op, bool& handled);
  Status op_memo(uint8_t op, bool& handled);
  Status op_object(uint8_t op, bool& handled);
  Status push_global(std::string module, std::string attr);
  Status set_items(PyValue* dict, const std::vector<PyValue*>& kv);
  StatusOr<PyValue*> reduce(PyValue* callable, PyValue* args);
  StatusOr<PyValue*> rebuild_tensor(const std::vector<PyValue*>& args);
  StatusOr<PyValue*> persistent_load(PyValue* pid);
  Status build(PyValue* obj, PyValue* state);

  std::string_view in_;
  size_t pos_ = 0;
  size_t op_at_ = 0;
  const std::string& name_;
  UnpickleLimits limits_;
  Unpickled out_;
  std::vector<PyValue*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PyValue*> memo_;
  std::unordered_map<std::string, PyStorage*> storages_;
  std::unordered_map<const PyValue*, std::unordered_map<std::string, size_t>> dict_index_;
  uint64_t copied_ = 0;  // elements copied by Size / set / BUILD (bounded like values)
  bool stopped_ = false;
};

// Copies of existing containers (torch.Size, set, BUILD's attributes) are charged against the
// value budget: a few bytes of pickle can copy a long list again and again.
Status Unpickler::charge_copy(size_t n) {
  copied_ += n;
  if (copied_ > limits_.max_values) return bad("more than {} elements copied", limits_.max_values);
  return ok_status();
}

StatusOr<PyValue*> Unpickler::make(PyKind kind) {
  if (out_.arena_.size() >= limits_.max_values)
    return bad("more than {} values", limits_.max_values);
  out_.arena_.push_back(std::make_unique<PyValue>());
  out_.arena_.back()->kind = kind;
  return out_.arena_.back().get();
}

Status Unpickler::take(size_t n, std::string_view& out) {
  if (n > in_.size() - pos_)
    return bad("truncated ({} bytes wanted, {} left)", n, in_.size() - pos_);
  out = in_.substr(pos_, n);
  pos_ += n;
  return ok_status();
}

StatusOr<uint64_t> Unpickler::uint_le(size_t n) {
  std::string_view b;
  ZERO_RETURN_IF_ERROR(take(n, b));
  uint64_t v = 0;
  for (size_t k = 0; k < n; ++k) v |= static_cast<uint64_t>(static_cast<uint8_t>(b[k])) << (8 * k);
  return v;
}

StatusOr<PyValue*> Unpickler::pop() {
  if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) {
    return bad("stack underflow");
  }
  PyValue* v = stack_.back();
  stack_.pop_back();
  return v;
}

StatusOr<PyValue*> Unpickler::top() {
  if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) {
    return bad("stack underflow");
  }
  return stack_.back();
}

StatusOr<std::vector<PyValue*>> Unpickler::pop_mark() {
  if (marks_.empty()) return bad("no MARK on the stack");
  const size_t m = marks_.back();
  marks_.pop_back();
  std::vector<PyValue*> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
  stack_.resize(m);
  return items;
}

StatusOr<Unpickled> Unpickler::run() {
  while (!stopped_) {
    if (pos_ >= in_.size()) return bad("truncated: no STOP opcode");
    op_at_ = pos_;
    const uint8_t op = static_cast<uint8_t>(in_[pos_++]);
    bool handled = false;
    ZERO_RETURN_IF_ERROR(op_scalar(op, handled));
    if (!handled) ZERO_RETURN_IF_ERROR(op_container(op, handled));
    if (!handled) ZERO_RETURN_IF_ERROR(op_memo(op, handled));
    if (!handled) ZERO_RETURN_IF_ERROR(op_object(op, handled));
    if (!handled) return refuse("opcode 0x{:02x} is not one torch.save writes; refused", op);
  }
  if (stack_.size() != 1 || !marks_.empty()) return bad("{} values left at STOP", stack_.size());
  out_.root_ = stack_.back();
  return std::move(out_);
}

Status Unpickler::op_scalar(uint8_t op, bool& handled) {
  handled = true;
  std::string_view b;
  PyValue* v = nullptr;
  switch (op) {
    case 0x80: {  // PROTO
      ZERO_ASSIGN_OR_RETURN(uint64_t proto, uint_le(1));
      if (proto < 2 || proto > 5) return refuse("pickle protocol {} is not read", proto);
      return ok_status();
    }
    case 0x95: return uint_le(8).status();          // FRAME: a length hint only
    case '.': stopped_ = true; return ok_status();  // STOP
    case 'N': {
      ZERO_ASSIGN_OR_RETURN(v, make(PyKind::kNone));
      break;
    }
    case 0x88:
    case 0x89: {  // NEWTRUE / NEWFALSE
      ZERO_ASSIGN_OR_RETURN(v, make(PyKind::kBool));
      v->b = op == 0x88;
      break;
    }
    case 'K':
    case 'M':
    case 'J': {  // BININT1 / BININT2 / BININT
      const size_t n = op == 'K' ? 1 : op == 'M' ? 2 : 4;
      ZERO_ASSIGN_OR_RETURN(uint64_t u, uint_le(n));
      ZERO_ASSIGN_OR_RETURN(v, make(PyKind::kInt));
      v->i = op == 'J' ? static_cast<int32_t>(static_cast<uint32_t>(u)) : static_cast<int64_t>(u);
      break;
    }
    case 0x8a:
    case 0x8b: {  // LONG1 / LONG4: little-endian two's complement
      ZERO_ASSIGN_OR_RETURN(uint64_t n, uint_le(op == 0x8a ? 1 : 4));
      if (n > 8) return refuse("an integer of {} bytes does not fit 64 bits", n);
      ZERO_ASSIGN_OR_RETURN(uint64_t u, uint_le(static_cast<size_t>(n)));
      if (n > 0 && n < 8 && (u >> (8 * n - 1)) & 1) u |= ~uint64_t{0} << (8 * n);
      ZERO_ASSIGN_OR_RETURN(v, make(PyKind::kInt));
      v->i = static_cast<int64_t>(u);
      break;
    }
    case 'G': {  // BINFLOAT: big-endian double
      ZERO_RETURN_IF_ERROR(take(8, b));
      uint64_t u = 0;
      for (char c : b) u = (u << 8) | static_cast<uint8_t>(c);
      ZERO_ASSIGN_OR_RETURN(v, make(PyKind::kFloat));
      std::memcpy(&v->f, &u, 8);
      break;
    }
    case 'X':
    case 0x8c:
    case 0x8d:
    case 'C':
    case 'B':
    case 'T':
    case 'U': {
      // BINUNICODE / SHORT_BINUNICODE / BINUNICODE8 / SHORT_BINBYTES / BINBYTES / BINSTRING /
      // SHORT_BINSTRING
      const size_t len_bytes = (op == 0x8c || op == 'C' || op == 'U') ? 1 : op == 0x8d ? 8 : 4;
      ZERO_ASSIGN_OR_RETURN(uint64_t n, uint_le(len_bytes));
      if (n > in_.size()) return bad("string of {} bytes in a {}-byte pickle", n, in_.size());
      ZERO_RETURN_IF_ERROR(take(static_cast<size_t>(n), b));
      const bool bytes = op == 'C' || op == 'B';
      ZERO_ASSIGN_OR_RETURN(v, make(bytes ? PyKind::kBytes : PyKind::kString));
      v->s.assign(b);
      break;
    }
    default: handled = false; return ok_status();
  }
  stack_.push_back(v);
  return ok_status();
}

Status Unpickler::set_items(PyValue* dict, const std::vector<PyValue*>& kv) {
  if (dict->kind != PyKind::kDict) return refuse("SETITEM on a {}", dict->type_name());
  if (kv.size() % 2 != 0) return bad("SETITEMS with an odd number of values");
  for (size_t k = 0; k < kv.size(); k += 2) {
    PyValue* key = kv[k];
    // str / int keys replace an earlier equal key, as Python's dict does; found through an index
    // (a linear search would make a hostile dict of n keys cost n^2).
    if (key->kind == PyKind::kString || key->kind == PyKind::kInt) {
      std::string id = key->kind == PyKind::kString ? "s" + key->s : "i" + std::to_string(key->i);
      auto [it, inserted] = dict_index_[dict].emplace(std::move(id), dict->dict.size());
      if (!inserted) {
        dict->dict[it->second].second = kv[k + 1];
        continue;
      }
    }
    dict->dict.emplace_back(key, kv[k + 1]);
  }
  return ok_status();
}

Status Unpickler::op_container(uint8_t op, bool& handled) {
  handled = true;
  PyValue* v = nullptr;
  switch (op) {
    case '}': {
      ZERO_ASSIGN_OR_RETURN(v, make(PyKind::kDict));
      break;
    }  // EMPTY_DICT
    case ']': {
      ZERO_ASSIGN_OR_RETURN(v, make(PyKind::kList));
      break;
    }  // EMPTY_LIST
    case ')': {
      ZERO_ASSIGN_OR_RETURN(v, make(PyKind::kTuple));
      break;
    }  // EMPTY_TUPLE
    case 0x8f: {
      ZERO_ASSIGN_OR_RETURN(v, make(PyKind::kList));
      break;
    }                                                               // EMPTY_SET (as a list)
    case '(': marks_.push_back(stack_.size()); return ok_status();  // MARK
    case '0': return pop().status();                                // POP
    case '1': return pop_mark().status();                           // POP_MARK
    case '2': {                                                     // DUP
      ZERO_ASSIGN_OR_RETURN(PyValue * t, top());
      stack_.push_back(t);
      return ok_status();
    }
    case 0x85:
    case 0x86:
    case 0x87: {  // TUPLE1 / TUPLE2 / TUPLE3
      const size_t n = static_cast<size_t>(op - 0x84);
      ZERO_ASSIGN_OR_RETURN(v, make(PyKind::kTuple));
      v->items.resize(n);
      for (size_t k = n; k-- > 0;) {
        ZERO_ASSIGN_OR_RETURN(v->items[k], pop());
      }
      break;
    }
    case 't':
    case 0x91: {  // TUPLE / FROZENSET
      ZERO_ASSIGN_OR_RETURN(auto items, pop_mark());
      ZERO_ASSIGN_OR_RETURN(v, make(op == 't' ? PyKind::kTuple : PyKind::kList));
      v->items = std::move(items);
      break;
    }
    case 'a':
    case 'e':
    case 0x90: {  // APPEND / APPENDS / ADDITEMS
      std::vector<PyValue*> items;
      if (op == 'a') {
        ZERO_ASSIGN_OR_RETURN(PyValue * item, pop());
        items.push_back(item);
      } else {
        ZERO_ASSIGN_OR_RETURN(items, pop_mark());
      }
      ZERO_ASSIGN_OR_RETURN(PyValue * list, top());
      if (list->kind != PyKind::kList) return refuse("APPEND to a {}", list->type_name());
      list->items.insert(list->items.end(), items.begin(), items.end());
      return ok_status();
    }
    case 's':
    case 'u': {  // SETITEM / SETITEMS
      std::vector<PyValue*> kv;
      if (op == 's') {
        kv.resize(2);
        ZERO_ASSIGN_OR_RETURN(kv[1], pop());
        ZERO_ASSIGN_OR_RETURN(kv[0], pop());
      } else {
        ZERO_ASSIGN_OR_RETURN(kv, pop_mark());
      }
      ZERO_ASSIGN_OR_RETURN(PyValue * dict, top());
      return set_items(dict, kv);
    }
    default: handled = false; return ok_status();
  }
  stack_.push_back(v);
  return ok_status();
}

Status Unpickler::op_memo(uint8_t op, bool& handled) {
  handled = true;
  uint64_t index = 0;
  switch (op) {
    case 'q':
    case 'r':
    case 0x94: {  // BINPUT / LONG_BINPUT / MEMOIZE
      if (op == 0x94) {
        index = memo_.size();
      } else {
        ZERO_ASSIGN_OR_RETURN(index, uint_le(op == 'q' ? 1 : 4));
      }
      if (index > limits_.max_memo_index) return bad("memo index {} too large", index);
      ZERO_ASSIGN_OR_RETURN(PyValue * t, top());
      memo_[index] = t;
      return ok_status();
    }
    case 'h':
    case 'j': {  // BINGET / LONG_BINGET
      ZERO_ASSIGN_OR_RETURN(index, uint_le(op == 'h' ? 1 : 4));
      auto it = memo_.find(index);
      if (it == memo_.end()) return bad("memo index {} was never set", index);
      stack_.push_back(it->second);
      return ok_status();
    }
    default: handled = false; return ok_status();
  }
}

// GLOBAL / STACK_GLOBAL: only allowlisted names become values; anything else is refused here,
// before a REDUCE could ask to call it.
Status Unpickler::push_global(std::string module, std::string attr) {
  if (module == "__builtin__") module = "builtins";  // protocol 2's name for it
  const std::string name = module + "." + attr;
  if (!storage_type(name) && !listed(kFunctions, name) && !listed(kClasses, name) &&
      !listed(kConstants, name)) {
    return refuse(
        "global '{}' is not one PyTorch or DeepSpeed checkpoints use; refused (nothing "
        "is imported or run)",
        name);
  }
  ZERO_ASSIGN_OR_RETURN(PyValue * v, make(PyKind::kGlobal));
  v->s = name;
  if (listed(kConstants, name)) {
    v->kind = PyKind::kString;
    v->s = attr;
  }
  stack_.push_back(v);
  return ok_status();
}

Status Unpickler::op_object(uint8_t op, bool& handled) {
  handled = true;
  switch (op) {
    case 'c': {  // GLOBAL "module\nname\n"
      const size_t nl1 = in_.find('\n', pos_);
      const size_t nl2 = nl1 == std::string_view::npos ? nl1 : in_.find('\n', nl1 + 1);
      if (nl2 == std::string_view::npos) return bad("truncated GLOBAL");
      std::string module(in_.substr(pos_, nl1 - pos_)), attr(in_.substr(nl1 + 1, nl2 - nl1 - 1));
      pos_ = nl2 + 1;
      return push_global(std::move(module), std::move(attr));
    }
    case 0x93: {  // STACK_GLOBAL
      ZERO_ASSIGN_OR_RETURN(PyValue * attr, pop());
      ZERO_ASSIGN_OR_RETURN(PyValue * module, pop());
      if (attr->kind != PyKind::kString || module->kind != PyKind::kString) {
        return bad("STACK_GLOBAL of non-strings");
      }
      return push_global(module->s, attr->s);
    }
    case 'R':
    case 0x81: {  // REDUCE / NEWOBJ
      ZERO_ASSIGN_OR_RETURN(PyValue * args, pop());
      ZERO_ASSIGN_OR_RETURN(PyValue * callable, pop());
      ZERO_ASSIGN_OR_RETURN(PyValue * v, reduce(callable, args));
      stack_.push_back(v);
      return ok_status();
    }
    case 'b': {  // BUILD
      ZERO_ASSIGN_OR_RETURN(PyValue * state, pop());
      ZERO_ASSIGN_OR_RETURN(PyValue * obj, top());
      return build(obj, state);
    }
    case 'Q': {  // BINPERSID
      ZERO_ASSIGN_OR_RETURN(PyValue * pid, pop());
      ZERO_ASSIGN_OR_RETURN(PyValue * v, persistent_load(pid));
      stack_.push_back(v);
      return ok_status();
    }
    default: handled = false; return ok_status();
  }
}

Status Unpickler::build(PyValue* obj, PyValue* state) {
  switch (obj->kind) {
    case PyKind::kObject:
      // A (slots, dict) pair or a dict: the attributes.
      if (state->kind == PyKind::kTuple && state->items.size() == 2) state = state->items[1];
      if (state->kind == PyKind::kDict) {
        ZERO_RETURN_IF_ERROR(charge_copy(state->dict.size()));
        obj->dict = state->dict;
      }
      return ok_status();
    case PyKind::kDict:    // OrderedDict's _metadata (module versions): not needed
    case PyKind::kTensor:  // a Parameter's / tensor's Python attributes: not needed
      return ok_status();
    default: return refuse("BUILD on a {}", obj->type_name());
  }
}

StatusOr<PyValue*> Unpickler::persistent_load(PyValue* pid) {
  // ('storage', torch.<T>Storage, key, location, numel)
  if (pid->kind != PyKind::kTuple || pid->items.size() != 5 ||
      pid->items[0]->kind != PyKind::kString || pid->items[0]->s != "storage") {
    return refuse("persistent id is not a torch storage ('storage', type, key, location, numel)");
  }
  const PyValue* type = pid->items[1];
  const PyValue* key = pid->items[2];
  const PyValue* numel = pid->items[4];
  const StorageType* st = type->kind == PyKind::kGlobal ? storage_type(type->s) : nullptr;
  if (!st) return refuse("storage of type {} is not read", type->type_name());
  if (key->kind != PyKind::kString || numel->kind != PyKind::kInt || numel->i < 0) {
    return bad("malformed storage persistent id");
  }
  auto it = storages_.find(key->s);
  if (it == storages_.end()) {
    ZERO_ASSIGN_OR_RETURN(PyValue * v, make(PyKind::kStorage));
    v->storage = PyStorage{st->dtype, key->s, numel->i};
    it = storages_.emplace(key->s, &v->storage).first;
    out_.storages_.push_back(&v->storage);
    return v;
  }
  if (it->second->dtype != st->dtype || it->second->numel != numel->i) {
    return bad("storage '{}' is declared twice with different types or sizes", key->s);
  }
  ZERO_ASSIGN_OR_RETURN(PyValue * v, make(PyKind::kStorage));
  v->storage = *it->second;
  return v;
}

StatusOr<PyValue*> Unpickler::rebuild_tensor(const std::vector<PyValue*>& args) {
  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks
  //                    [, metadata])
  if (args.size() < 4 || args[0]->kind != PyKind::kStorage || args[1]->kind != PyKind::kInt ||
      !args[2]->is_sequence() || !args[3]->is_sequence() ||
      args[2]->items.size() != args[3]->items.size() || args[2]->items.size() > 16) {
    return bad("malformed torch._utils._rebuild_tensor_v2 arguments");
  }
  const PyStorage* storage = storages_.at(args[0]->storage.key);
  ZERO_ASSIGN_OR_RETURN(PyValue * v, make(PyKind::kTensor));
  PyTensor& t = v->tensor;
  t.storage = storage;
  t.offset = args[1]->i;
  // The last element the view touches, offset + sum((size_i - 1) * stride_i), must lie inside the
  // storage (an empty view touches nothing). Every step is overflow-checked.
  bool empty = false;
  uint64_t last = 0, numel = 1;
  for (size_t d = 0; d < args[2]->items.size(); ++d) {
    const PyValue* size = args[2]->items[d];
    const PyValue* stride = args[3]->items[d];
    if (size->kind != PyKind::kInt || stride->kind != PyKind::kInt || size->i < 0 ||
        stride->i < 0) {
      return bad("tensor size / stride must be non-negative ints");
    }
    t.shape.push_back(size->i);
    t.stride.push_back(stride->i);
    if (size->i == 0) empty = true;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(size->i), &numel)) {
      return bad("tensor numel overflows");
    }
    uint64_t reach = 0;
    if (size->i > 0 && (__builtin_mul_overflow(static_cast<uint64_t>(size->i - 1),
                                               static_cast<uint64_t>(stride->i), &reach) ||
                        __builtin_add_overflow(last, reach, &last))) {
      return bad("tensor extent overflows");
    }
  }
  if (t.offset < 0) return bad("negative storage offset {}", t.offset);
  if (!empty && (__builtin_add_overflow(last, static_cast<uint64_t>(t.offset), &last) ||
                 last >= static_cast<uint64_t>(storage->numel))) {
    return bad("tensor (offset {}, shape {}) reaches past its storage '{}' of {} elements",
               t.offset, fmt::join(t.shape, "x"), storage->key, storage->numel);
  }
  return v;
}

StatusOr<PyValue*> Unpickler::reduce(PyValue* callable, PyValue* args) {
  if (callable->kind != PyKind::kGlobal) return refuse("call of a {}", callable->type_name());
  if (!args->is_sequence()) return bad("arguments of {} are a {}", callable->s, args->type_name());
  const std::string& fn = callable->s;
  const std::vector<PyValue*>& a = args->items;
  if (fn == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(a);
  if (fn == "torch._utils._rebuild_parameter") {
    if (a.empty() || a[0]->kind != PyKind::kTensor) return bad("malformed _rebuild_parameter");
    return a[0];
  }
  if (fn == "torch._tensor._rebuild_from_type_v2") {
    // (func, type, args, state): only a plain tensor / Parameter rebuilt by _rebuild_tensor_v2.
    if (a.size() < 3 || a[0]->kind != PyKind::kGlobal || a[1]->kind != PyKind::kGlobal ||
        (a[1]->s != "torch.Tensor" && a[1]->s != "torch.nn.parameter.Parameter")) {
      return refuse("_rebuild_from_type_v2 of anything but a plain tensor");
    }
    return reduce(a[0], a[2]);
  }
  if (fn == "collections.OrderedDict") {
    if (!a.empty()) return refuse("OrderedDict built from arguments");
    return make(PyKind::kDict);
  }
  if (fn == "torch.Size" || fn == "builtins.set" || fn == "builtins.frozenset") {
    ZERO_ASSIGN_OR_RETURN(PyValue * v, make(fn == "torch.Size" ? PyKind::kTuple : PyKind::kList));
    if (a.size() == 1 && a[0]->is_sequence()) {
      ZERO_RETURN_IF_ERROR(charge_copy(a[0]->items.size()));
      v->items = a[0]->items;
    } else if (!a.empty()) {
      return bad("malformed {} arguments", fn);
    }
    return v;
  }
  if (fn == "_codecs.encode" || fn == "torch.device") {  // bytes in protocol 2; a device name
    if (a.empty() || a[0]->kind != PyKind::kString) return bad("malformed {} arguments", fn);
    ZERO_ASSIGN_OR_RETURN(PyValue * v,
                          make(fn == "torch.device" ? PyKind::kString : PyKind::kBytes));
    v->s = a[0]->s;  // (latin-1 re-encoding of code points > 0x7f is not needed for our reads)
    return v;
  }
  if (fn == "builtins.getattr") {  // an enum member by name: getattr(EnumClass, "member")
    if (a.size() != 2 || a[0]->kind != PyKind::kGlobal || !listed(kClasses, a[0]->s) ||
        a[1]->kind != PyKind::kString) {
      return refuse("getattr of anything but an allowed class's member");
    }
    ZERO_ASSIGN_OR_RETURN(PyValue * v, make(PyKind::kObject));
    ZERO_ASSIGN_OR_RETURN(PyValue * key, make(PyKind::kString));
    v->s = a[0]->s;
    key->s = "name";
    v->dict.emplace_back(key, a[1]);
    return v;
  }
  if (fn == "copyreg._reconstructor") {  // (cls, object, None): an object of an allowed class
    if (a.empty() || a[0]->kind != PyKind::kGlobal || !listed(kClasses, a[0]->s)) {
      return refuse("copyreg._reconstructor of a class that is not allowed");
    }
    ZERO_ASSIGN_OR_RETURN(PyValue * v, make(PyKind::kObject));
    v->s = a[0]->s;
    return v;
  }
  if (listed(kClasses, fn)) {  // NEWOBJ / an enum's REDUCE(cls, (value,)): attributes by BUILD
    ZERO_ASSIGN_OR_RETURN(PyValue * v, make(PyKind::kObject));
    v->s = fn;
    if (!a.empty()) {
      ZERO_ASSIGN_OR_RETURN(PyValue * key, make(PyKind::kString));
      key->s = "value";
      v->dict.emplace_back(key, a[0]);
    }
    return v;
  }
  return refuse("'{}' cannot be called; refused (nothing is run)", fn);
}

StatusOr<Unpickled> unpickle(std::string_view bytes, const std::string& name,
                             const UnpickleLimits& limits) {
  Unpickler vm(bytes, name, limits);
  return vm.run();
}

}  // namespace zero::checkpoint
