// BufferPool: transient host buffers kept for reuse. Large allocations go back to the OS when
// freed, so a fresh one is page-faulted and zeroed by the kernel every time it is touched (~10% of
// a CPU step at 124M parameters when gradient buffers were allocated per micro-step). The sharding
// layer's buffers recur with the same sizes every micro-step, so a few kept ones serve them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>

#include "core/tensor.h"

namespace zero::sharding {

class BufferPool {
 public:
  // Keeps at most `max_kept` returned buffers (the oldest go first).
  explicit BufferPool(size_t max_kept) : max_kept_(max_kept) {}

  // A kept buffer of this size and dtype (stale contents unless `zeroed`), else a new
  // zero-initialised one.
  Tensor take(int64_t numel, DType dtype, bool zeroed = false) {
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      if (it->numel() == numel && it->dtype() == dtype) {
        Tensor t = std::move(*it);
        kept_.erase(it);
        kept_numel_ -= t.numel();
        if (zeroed) std::memset(t.data(), 0, t.nbytes());
        return t;
      }
    }
    return Tensor(Shape{numel}, dtype);
  }

  void give(Tensor t) {
    kept_numel_ += t.numel();
    kept_.push_back(std::move(t));
    if (kept_.size() > max_kept_) drop_oldest();
  }

  // Drops the oldest kept buffers until at most `max_numel` elements are kept.
  void trim(int64_t max_numel) {
    while (!kept_.empty() && kept_numel_ > max_numel) drop_oldest();
  }
  int64_t kept_numel() const { return kept_numel_; }

 private:
  void drop_oldest() {
    kept_numel_ -= kept_.front().numel();
    kept_.pop_front();
  }

  size_t max_kept_;
  std::deque<Tensor> kept_;
  int64_t kept_numel_ = 0;
};

}  // namespace zero::sharding
