// The CPU emulator's stand-in for CUB's DeviceRadixSort (docs/emu.md): found before the toolkit's
// header on the emu targets' include path. SortPairs is a stable sort on the key bits
// [begin_bit, end_bit), which is what an LSD radix sort computes; the temporary storage it asks
// for is a token 16 bytes, so callers still size, carve and pass it. The sort is queued on its
// stream, as CUB's kernels are (it reads keys an earlier launch on that stream writes).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "emu/runtime_emu.h"

namespace cub {

struct DeviceRadixSort {
  template <typename Key, typename Value>
  static cudaError_t SortPairs(void* temp_storage, size_t& temp_storage_bytes, const Key* keys_in,
                               Key* keys_out, const Value* values_in, Value* values_out,
                               int num_items, int begin_bit = 0,
                               int end_bit = static_cast<int>(sizeof(Key) * 8),
                               cudaStream_t stream = nullptr) {
    constexpr size_t kTempBytes = 16;
    if (temp_storage == nullptr) {
      temp_storage_bytes = kTempBytes;
      return cudaSuccess;
    }
    if (temp_storage_bytes < kTempBytes || num_items < 0) return cudaErrorInvalidValue;
    ::zero::emu::stream_of(stream).enqueue([=] {
      const int bits = end_bit - begin_bit;
      const uint64_t mask = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
      const auto digit = [&](Key k) { return (static_cast<uint64_t>(k) >> begin_bit) & mask; };
      std::vector<int> order(static_cast<size_t>(num_items));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return digit(keys_in[a]) < digit(keys_in[b]); });
      for (int i = 0; i < num_items; ++i) {
        keys_out[i] = keys_in[order[i]];
        values_out[i] = values_in[order[i]];
      }
    });
    return cudaSuccess;
  }
};

}  // namespace cub
