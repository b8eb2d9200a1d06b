// libFuzzer target: arbitrary bytes as a torch.save file (zip + restricted pickle). Whatever opens
// must also read every tensor it holds without crashing; reads are bounded by the checked storages.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/torch_archive.h"

namespace {

// Visits values iteratively (the pickle may nest deeply or share values); bounded visit count.
void read_tensors(const zero::checkpoint::TorchArchive& archive) {
  using zero::checkpoint::PyKind;
  using zero::checkpoint::PyValue;
  std::vector<const PyValue*> todo = {&archive.root()};
  std::vector<float> out;
  for (size_t visits = 0; !todo.empty() && visits < 10000; ++visits) {
    const PyValue* v = todo.back();
    todo.pop_back();
    if (v->kind == PyKind::kTensor && v->tensor.numel() <= (1 << 20)) {
      (void)archive.read_f32(v->tensor, out, "fuzz");
    }
    for (const PyValue* item : v->items) todo.push_back(item);
    for (const auto& kv : v->dict) todo.push_back(kv.second);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  auto archive = zero::checkpoint::TorchArchive::from_file(zero::memory_file(bytes, "fuzz.pt"));
  if (archive.ok()) read_tensors(**archive);
  return 0;
}
