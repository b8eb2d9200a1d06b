// Shape formatting and aligned host allocation.
#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include <fmt/format.h>

namespace zero {

std::string Shape::to_string() const { return fmt::format("({})", fmt::join(dims_, ", ")); }

void AlignedFree::operator()(void* p) const { std::free(p); }

AlignedBuffer aligned_alloc_bytes(size_t nbytes) {
  constexpr size_t kAlign = 64;
  size_t rounded = (nbytes + kAlign - 1) / kAlign * kAlign;
  if (rounded == 0) rounded = kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return AlignedBuffer(static_cast<std::byte*>(p));
}

Tensor::Tensor(Shape shape, DType dtype)
    : shape_(std::move(shape)),
      dtype_(dtype),
      buffer_(aligned_alloc_bytes(static_cast<size_t>(shape_.numel()) * dtype_bytes(dtype))) {}

}  // namespace zero
