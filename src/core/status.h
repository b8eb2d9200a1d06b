// Status / StatusOr: the error tier for what fails in production (config, I/O, bootstrap, bad
// checkpoints). Broken invariants use ZERO_CHECK (core/check.h) instead. No exceptions cross layer
// boundaries.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace zero {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad user input: config, flags, a malformed file
  kNotFound,
  kAlreadyExists,
  kFailedPrecondition,
  kOutOfRange,
  kDataLoss,  // corrupted or truncated data (checksums, short files)
  kIoError,
  kResourceExhausted,  // out of memory / disk / pinned memory
  kUnimplemented,
  kInternal,
  kDeadlineExceeded,  // collective timeouts
};

const char* status_code_name(StatusCode code);

// A success or an error code with a human-readable message. Cheap to copy on success.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message" style, for logs.
  std::string to_string() const;

  // Returns a copy with `prefix: ` prepended to the message (adds context while propagating).
  Status with_context(const std::string& prefix) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }

template <typename... Args>
Status invalid_argument(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kInvalidArgument, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status not_found(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kNotFound, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status io_error(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kIoError, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status data_loss(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kDataLoss, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status failed_precondition(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kFailedPrecondition, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status unimplemented(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kUnimplemented, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status resource_exhausted(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kResourceExhausted, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
Status internal_error(fmt::format_string<Args...> f, Args&&... args) {
  return Status(StatusCode::kInternal, fmt::format(f, std::forward<Args>(args)...));
}

// A value or an error Status. REQUIRES: ok() before value().
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : status_(status) {}        // NOLINT: implicit by design
  StatusOr(Status&& status) : status_(std::move(status)) {}  // NOLINT
  StatusOr(const T& value) : value_(value) {}                // NOLINT
  StatusOr(T&& value) : value_(std::move(value)) {}          // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace zero

#define ZERO_STATUS_CONCAT_INNER(a, b) a##b
#define ZERO_STATUS_CONCAT(a, b) ZERO_STATUS_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (a Status) is not ok.
#define ZERO_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::zero::Status _zero_status = (expr);        \
    if (!_zero_status.ok()) return _zero_status; \
  } while (0)

// `ZERO_ASSIGN_OR_RETURN(auto x, f());` — unwraps a StatusOr or returns its error.
#define ZERO_ASSIGN_OR_RETURN(lhs, expr) \
  ZERO_ASSIGN_OR_RETURN_IMPL(ZERO_STATUS_CONCAT(_zero_statusor_, __LINE__), lhs, expr)
#define ZERO_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
