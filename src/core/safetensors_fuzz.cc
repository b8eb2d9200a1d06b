// libFuzzer target: arbitrary bytes into the in-memory safetensors parser; whatever parses must
// also read back (raw, and as float where the dtype converts) without crashing.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto reader = zero::SafetensorsReader::from_buffer(bytes, "fuzz");
  if (!reader.ok()) return 0;
  std::vector<char> raw;
  std::vector<float> floats;
  for (const zero::SafetensorsEntry& e : reader->tensors()) {
    // Offsets were validated against the input size, so these allocations are bounded by it.
    raw.resize(e.nbytes());
    (void)reader->read(e.name, raw.data(), raw.size());
    if (e.nbytes() >= 2) (void)reader->read_range(e.name, 1, e.nbytes() - 2, raw.data());
    if (zero::to_dtype(e.dtype)) {
      floats.resize(static_cast<size_t>(e.numel()));
      (void)reader->read_f32(e.name, floats.data(), e.numel());
    }
  }
  return 0;
}
