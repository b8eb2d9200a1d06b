// Bit-exact float <-> bf16 / f16 conversions on host and device, mirroring core/dtype.h: round to
// nearest even, overflow to infinity, NaN stays NaN (bf16 keeps the payload and sets the quiet bit,
// f16 becomes the canonical quiet NaN), 16-bit -> float exact. The CUDA cast kernels use these so a
// device cast is bitwise identical to convert_from_f32 / convert_to_f32; arithmetic kernels use the
// hardware conversions instead (same values, NaN payloads aside).
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#include "kernels/host_device.h"

namespace zero::kernels::bits {

ZERO_HOST_DEVICE uint32_t f32_as_u32(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

ZERO_HOST_DEVICE float u32_as_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

ZERO_HOST_DEVICE float bf16_bits_to_f32(uint16_t h) { return u32_as_f32(uint32_t{h} << 16); }

ZERO_HOST_DEVICE uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = f32_as_u32(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign and payload, force the quiet bit
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  u += 0x7fffu + ((u >> 16) & 1u);  // nearest even; a carry out of the mantissa reaches inf
  return static_cast<uint16_t>(u >> 16);
}

ZERO_HOST_DEVICE float f16_bits_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    return u32_as_f32(sign | f32_as_u32(static_cast<float>(mantissa) * 0x1p-24f));
  }
  if (exponent == 0x1f) return u32_as_f32(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  return u32_as_f32(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

ZERO_HOST_DEVICE uint16_t f32_to_f16_bits(float f) {
  const uint32_t u = f32_as_u32(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (magnitude < 0x38800000u) {
    // Below the smallest normal half (2^-14): value / 2^-24 is exact in float, and rounding it to
    // an integer (nearest even, the default mode) gives the subnormal's mantissa (1024: 2^-14).
    const float scaled = u32_as_f32(magnitude) * 0x1p24f;
#if defined(__CUDA_ARCH__)
    const float mantissa = rintf(scaled);
#else
    const float mantissa = nearbyintf(scaled);
#endif
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(mantissa));
  }
  // Normal: round the 13 dropped mantissa bits to nearest even, then rebias (127 -> 15).
  magnitude += 0xfffu + ((magnitude >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((magnitude >> 13) - (112u << 10)));
}

}  // namespace zero::kernels::bits
