// Overflow-checked int64 arithmetic for sizes computed from user input (config values, flags,
// model dimensions): a product that wraps becomes nullopt, so the caller can name the key.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>

namespace zero {

inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// a * b * c * ...; nullopt as soon as one step overflows.
inline std::optional<int64_t> checked_product(std::initializer_list<int64_t> factors) {
  int64_t out = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(out, f, &out)) return std::nullopt;
  }
  return out;
}

// a + b + c + ...; nullopt as soon as one step overflows.
inline std::optional<int64_t> checked_sum(std::initializer_list<int64_t> terms) {
  int64_t out = 0;
  for (int64_t t : terms) {
    if (__builtin_add_overflow(out, t, &out)) return std::nullopt;
  }
  return out;
}

// An int64 that remembers overflow: any sum or product involving an overflowed value, or one
// that overflows itself, is overflowed. Lets a formula be written once, plainly, and checked once
// at the end (e.g. a parameter count from model dimensions).
class CheckedInt64 {
 public:
  constexpr CheckedInt64(int64_t value = 0) : value_(value) {}  // NOLINT: implicit by design

  bool overflowed() const { return overflowed_; }
  // nullopt when overflowed.
  std::optional<int64_t> get() const {
    return overflowed_ ? std::nullopt : std::optional<int64_t>(value_);
  }

  friend CheckedInt64 operator+(CheckedInt64 a, CheckedInt64 b) {
    CheckedInt64 out;
    out.overflowed_ =
        a.overflowed_ || b.overflowed_ || __builtin_add_overflow(a.value_, b.value_, &out.value_);
    return out;
  }
  friend CheckedInt64 operator*(CheckedInt64 a, CheckedInt64 b) {
    CheckedInt64 out;
    out.overflowed_ =
        a.overflowed_ || b.overflowed_ || __builtin_mul_overflow(a.value_, b.value_, &out.value_);
    return out;
  }
  CheckedInt64& operator+=(CheckedInt64 b) { return *this = *this + b; }
  // Larger of two; overflowed when either is.
  friend CheckedInt64 max(CheckedInt64 a, CheckedInt64 b) {
    if (a.overflowed_) return a;
    if (b.overflowed_) return b;
    return a.value_ >= b.value_ ? a : b;
  }

 private:
  int64_t value_ = 0;
  bool overflowed_ = false;
};

}  // namespace zero
