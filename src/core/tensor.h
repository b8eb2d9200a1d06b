// Shape, Device, TensorView (a typed, shaped view over memory it does not own) and Tensor (owning,
// aligned host memory). Kernels take TensorViews; the model and ZeRO own flat buffers and hand out
// views.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"

namespace zero {

enum class Device : uint8_t { kCpu, kCuda };
inline const char* device_name(Device d) { return d == Device::kCuda ? "cuda" : "cpu"; }

// Row-major shape, up to 8 dims. numel() of a 0-dim shape is 1.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t dim(int i) const { return dims_[static_cast<size_t>(i < 0 ? i + rank() : i)]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims_) n *= d;
    return n;
  }
  const std::vector<int64_t>& dims() const { return dims_; }
  bool operator==(const Shape& other) const { return dims_ == other.dims_; }
  bool operator!=(const Shape& other) const { return dims_ != other.dims_; }
  // "(3, 768)" style.
  std::string to_string() const;

 private:
  std::vector<int64_t> dims_;
};

// Non-owning view. Contiguous, row-major. Copyable; lifetime of the memory is the owner's business.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;
  Device device = Device::kCpu;

  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_bytes(dtype); }

  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  float* f32() const {
    ZERO_CHECK(dtype == DType::kF32, "tensor is ", dtype_name(dtype), ", not f32");
    return static_cast<float*>(data);
  }
};

// 64-byte aligned host allocation (cache lines and AVX-512 loads).
struct AlignedFree {
  void operator()(void* p) const;
};
using AlignedBuffer = std::unique_ptr<std::byte[], AlignedFree>;
// Zero-initialised. REQUIRES: nbytes >= 0.
AlignedBuffer aligned_alloc_bytes(size_t nbytes);

// An owning host tensor (zero-initialised).
class Tensor {
 public:
  Tensor() = default;
  Tensor(Shape shape, DType dtype = DType::kF32);

  TensorView view() const { return TensorView{buffer_.get(), dtype_, shape_, Device::kCpu}; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  // 0 for an empty (default-constructed) tensor.
  int64_t numel() const { return buffer_ ? shape_.numel() : 0; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_bytes(dtype_); }
  void* data() const { return buffer_.get(); }
  // True for a default-constructed (unallocated) tensor.
  bool empty() const { return buffer_ == nullptr; }
  float* f32() const { return view().f32(); }

 private:
  Shape shape_;
  DType dtype_ = DType::kF32;
  AlignedBuffer buffer_;
};

}  // namespace zero
