// Test helpers for CUDA kernels (the *_cuda_test.cc files beside each op): skipping without a GPU,
// host <-> device copies in any storage dtype, and the comparisons of tolerance.h. Header-only;
// only built with the CUDA backend.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/device.h"
#include "core/dtype.h"
#include "kernels/tolerance.h"

// Skips the test with the probe's reason when no GPU is usable (CUDA error 100 or 35, or no
// device), so CI on GPU-less machines stays green while still compiling every .cu file. On the
// CPU emulator (src/emu/, docs/emu.md) every test runs.
#if defined(ZERO_CUDA_EMU)
#define ZERO_SKIP_WITHOUT_GPU() \
  do {                          \
  } while (0)
#else
#define ZERO_SKIP_WITHOUT_GPU()                                   \
  do {                                                            \
    if (!::zero::probe_cuda().available) {                        \
      GTEST_SKIP() << "no GPU: " << ::zero::probe_cuda().why_not; \
    }                                                             \
  } while (0)
#endif

namespace zero::kernels::testing {

// `gpu` on a GPU; `emulated` on the CPU emulator, which runs every CUDA thread as a host thread,
// so its shapes are the small, odd ones of the list (CI time; docs/emu.md).
template <typename T>
std::vector<T> gpu_or_emulated(std::vector<T> gpu, std::vector<T> emulated) {
#if defined(ZERO_CUDA_EMU)
  return emulated;
#else
  return gpu;
#endif
}

// The storage dtype of a CUDA element type.
template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::kF32;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return DType::kBF16;
  if constexpr (std::is_same_v<T, __half>) return DType::kF16;
}

// Host float -> storage T, rounding to nearest even exactly as core/dtype.h does.
template <typename T>
std::vector<T> to_storage(const std::vector<float>& v) {
  std::vector<T> out(v.size());
  if constexpr (std::is_same_v<T, float>) {
    out = v;
  } else {
    convert_from_f32(v.data(), out.data(), dtype_of<T>(), v.size());
  }
  return out;
}

template <typename T>
std::vector<float> from_storage(const std::vector<T>& v) {
  std::vector<float> out(v.size());
  if constexpr (std::is_same_v<T, float>) {
    out = v;
  } else {
    convert_to_f32(v.data(), dtype_of<T>(), out.data(), v.size());
  }
  return out;
}

// The values a kernel actually sees after rounding to T (the CPU reference runs on these).
template <typename T>
std::vector<float> rounded(const std::vector<float>& v) {
  return from_storage(to_storage<T>(v));
}

// The padding a Rounded16 copy's rows start with in tests: a kernel must leave it as it is.
inline constexpr uint16_t kCopy16Pad = 0xABCD;

// A kernel's Rounded16 copy (rows ld apart, padded with kCopy16Pad before the launch) against its
// fp32 output (rows, width): every element the output rounded to nearest even (the separate cast
// the copy replaces), bitwise; the padding untouched.
inline ::testing::AssertionResult copy16_is_rounded(const std::vector<uint16_t>& copy, int64_t ld,
                                                    const std::vector<float>& out, int64_t rows,
                                                    int64_t width, bool bf16) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < ld; ++c) {
      const uint16_t got = copy[static_cast<size_t>(r * ld + c)];
      const uint16_t want = c >= width ? kCopy16Pad
                            : bf16     ? float_to_bf16(out[static_cast<size_t>(r * width + c)]).bits
                                       : float_to_f16(out[static_cast<size_t>(r * width + c)]).bits;
      if (got != want) {
        return ::testing::AssertionFailure() << "row " << r << " column " << c << ": 0x" << std::hex
                                             << got << ", want 0x" << want;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// The Rounded16 cases of the kernel tests: 7 rows of 20 elements (rows padded to 24: packs that
// straddle rows) and of 64 (dense), each into bf16 and fp16. f(rows, width, ld, bf16).
template <typename F>
void for_each_copy16_case(F&& f) {
  for (const int64_t width : {int64_t{20}, int64_t{64}}) {
    for (const bool bf16 : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "width " << width << (bf16 ? " bf16" : " fp16"));
      f(int64_t{7}, width, (width + 7) / 8 * 8, bf16);
    }
  }
}

// Owning device array for tests (cudaMalloc / cudaFree).
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    if (n > 0) CUDA_ABORT_IF_ERROR(cudaMalloc(&p_, n * sizeof(T)));
    if (n > 0) CUDA_ABORT_IF_ERROR(cudaMemset(p_, 0, n * sizeof(T)));
    // Why the sync: cudaMemset runs on the legacy default stream, which does not order against the
    // non-blocking streams the kernels run on; unsynced, a kernel's output could be zeroed after
    // it was written (seen on an H100: flags read 0, whole outputs zero).
    CUDA_ABORT_IF_ERROR(cudaDeviceSynchronize());
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void upload(const std::vector<T>& host) {
    ASSERT_EQ(host.size(), n_);
    if (n_ > 0) {
      CUDA_ABORT_IF_ERROR(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
      // A pageable-memory cudaMemcpy may return before its DMA lands: order it before any stream.
      CUDA_ABORT_IF_ERROR(cudaDeviceSynchronize());
    }
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    // Why the device-wide sync: tests read results right after launching on some stream.
    CUDA_ABORT_IF_ERROR(cudaDeviceSynchronize());
    if (n_ > 0) {
      CUDA_ABORT_IF_ERROR(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    }
    return host;
  }
  std::vector<float> download_f32() const { return from_storage(download()); }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// Elementwise check |got - want| <= atol + rtol*|want|; reports the first few misses.
inline ::testing::AssertionResult all_close(const std::vector<float>& got,
                                            const std::vector<float>& want, Tolerance tol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  int misses = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    const bool both_nan = std::isnan(g) && std::isnan(w);
    const bool same_inf = std::isinf(g) && std::isinf(w) && (g > 0) == (w > 0);
    if (both_nan || same_inf) continue;
    if (!(std::fabs(g - w) <= tol.atol + tol.rtol * std::fabs(w))) {
      if (misses < 5) {
        first += "\n  [" + std::to_string(i) + "] got " + std::to_string(g) + " want " +
                 std::to_string(w);
      }
      ++misses;
    }
  }
  if (misses == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << misses << " of " << got.size() << " elements out of tolerance (rtol " << tol.rtol
         << ", atol " << tol.atol << "):" << first;
}

// ||got - want||_2 <= rtol * ||want||_2 (for accumulations over many terms).
inline ::testing::AssertionResult norm_close(const std::vector<float>& got,
                                             const std::vector<float>& want, double rtol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  }
  double err = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    err += d * d;
    ref += static_cast<double>(want[i]) * want[i];
  }
  err = std::sqrt(err);
  ref = std::sqrt(ref);
  if (err <= rtol * ref + 1e-12) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "relative error norm " << err / (ref > 0 ? ref : 1) << " > " << rtol;
}

// Odd shapes every kernel test sweeps (1-element, primes, 1xN, not multiples of warp/tile sizes).
inline const std::vector<int64_t>& odd_sizes() {
  static const std::vector<int64_t> sizes = {1, 3, 7, 31, 127, 257, 1031};
  return sizes;
}

}  // namespace zero::kernels::testing
