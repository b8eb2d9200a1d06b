// A CUDA kernel's optional second output: its fp32 result rounded to nearest even into bf16 or
// fp16, rows `ld` elements apart. The CUDA model of a 16-bit checkpoint feeds every GEMM a 16-bit
// copy of its input with rows padded to 16 bytes (cuBLASLt's alignment); a producer that writes the
// copy in the same pass saves the separate cast's launch and its re-read of the fp32 values (4
// bytes an element), with bitwise the same copy. Only the `width` real columns of a row are
// written; the padding is left as it is (as the separate cast leaves it).
#pragma once

#include <cstdint>

namespace zero::kernels {

struct Rounded16 {
  void* data = nullptr;  // null: no copy
  bool bf16 = true;      // else fp16
  int64_t ld = 0;        // elements from one row of the copy to the next (>= width)
  int64_t width =
      0;  // elements of a row (elementwise kernels: their flat data is (n / width, width))
};

}  // namespace zero::kernels
