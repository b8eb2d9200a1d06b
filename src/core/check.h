// ZERO_CHECK: the error tier for broken invariants (a bug, not bad input). Aborts with file:line
// and the values involved: ZERO_CHECK(got == want, "reduce-scatter numel ", got, " != ", want).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace zero::detail {

template <typename... Args>
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const Args&... args) {
  std::ostringstream os;
  ((os << args), ...);  // comma fold: an empty pack is a no-op, not a bare `os`
  std::fprintf(stderr, "zero: internal error at %s:%d: check failed: %s %s\n", file, line, cond,
               os.str().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace zero::detail

#define ZERO_CHECK(cond, ...)                                                             \
  do {                                                                                    \
    if (!(cond)) [[unlikely]] {                                                           \
      ::zero::detail::check_failed(__FILE__, __LINE__, #cond __VA_OPT__(, ) __VA_ARGS__); \
    }                                                                                     \
  } while (0)
