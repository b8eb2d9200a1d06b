// PromiseCompletion / CommHandle::ready.
#include "comm/comm_handle.h"

#include "core/check.h"

namespace zero {

void PromiseCompletion::fulfil(Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ZERO_CHECK(!result_.has_value(), "collective completed twice");
    result_ = std::move(status);
  }
  cv_.notify_all();
}

Status PromiseCompletion::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  // Why wait: the caller needs the collective's output buffer; the comm thread owns it until here.
  cv_.wait(lock, [&] { return result_.has_value(); });
  return *result_;
}

bool PromiseCompletion::done() {
  std::lock_guard<std::mutex> lock(mu_);
  return result_.has_value();
}

CommHandle CommHandle::ready(Status status) {
  auto completion = std::make_shared<PromiseCompletion>();
  completion->fulfil(std::move(status));
  return CommHandle(std::move(completion));
}

}  // namespace zero
