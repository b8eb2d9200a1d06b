// DType (f32, bf16, f16) and exact scalar conversions: float -> 16-bit rounds to nearest even, NaN
// stays NaN (quiet), overflow goes to infinity like IEEE casts; 16-bit -> float is exact.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace zero {

enum class DType : uint8_t { kF32, kBF16, kF16 };

constexpr size_t dtype_bytes(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }
// "f32" / "bf16" / "f16".
std::string_view dtype_name(DType dtype);
// Safetensors names: "F32" / "BF16" / "F16".
std::string_view dtype_safetensors_name(DType dtype);
// Accepts our names, safetensors names and DeepSpeed's ("fp32", "fp16", "bf16", "float32",
// "bfloat16", ...).
std::optional<DType> parse_dtype(std::string_view name);

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Storage type for bfloat16; arithmetic happens in float.
struct bf16 {
  uint16_t bits = 0;
};
// Storage type for IEEE half; arithmetic happens in float.
struct f16 {
  uint16_t bits = 0;
};

inline float bf16_to_float(bf16 h) { return bits_float(static_cast<uint32_t>(h.bits) << 16); }

inline bf16 float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign, force a quiet mantissa bit
    return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  }
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;  // round to nearest, ties to even (overflow carries into inf correctly)
  return bf16{static_cast<uint16_t>(u >> 16)};
}

float f16_to_float(f16 h);
f16 float_to_f16(float f);

// Round-trip helpers: the value a float takes after storage in `dtype`.
inline float round_to_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }
inline float round_to_f16(float f) { return f16_to_float(float_to_f16(f)); }
float round_to_dtype(float f, DType dtype);
// Calls f(round) with a callable rounding a float to `dtype`, chosen once outside the caller's
// loop (so an fp32 loop is a plain, vectorisable copy or add).
template <typename F>
void with_rounding(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kF32: f([](float x) { return x; }); return;
    case DType::kBF16: f([](float x) { return round_to_bf16(x); }); return;
    case DType::kF16: f([](float x) { return round_to_f16(x); }); return;
  }
}

// Bulk conversions (n elements; `src`/`dst` typed by dtype), bitwise equal to the scalar ones
// above; bf16 runs vectorised (AVX-512 / AVX2) where the CPU has it. Single-threaded: callers
// split large arrays across threads.
void convert_from_f32(const float* src, void* dst, DType dst_dtype, size_t n);
void convert_to_f32(const void* src, DType src_dtype, float* dst, size_t n);
// dst[i] = round_to_dtype(src[i], dtype) for i < n; dst may alias src.
void round_to_dtype(const float* src, float* dst, size_t n, DType dtype);
// acc[i] += round_to_dtype(src[i], dtype) for i < n (one fp32 add per element).
void accumulate_rounded(float* acc, const float* src, size_t n, DType dtype);

}  // namespace zero
