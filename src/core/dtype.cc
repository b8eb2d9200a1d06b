// DType names and f16 conversions (bf16 ones are inline in dtype.h).
#include "core/dtype.h"

#include <cmath>

#include "core/dtype_simd.h"

namespace zero {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
  }
  return "?";
}

std::string_view dtype_safetensors_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "f32" || name == "F32" || name == "fp32" || name == "float32" || name == "float" ||
      name == "torch.float32")
    return DType::kF32;
  if (name == "bf16" || name == "BF16" || name == "bfloat16" || name == "torch.bfloat16")
    return DType::kBF16;
  if (name == "f16" || name == "F16" || name == "fp16" || name == "float16" || name == "half" ||
      name == "torch.float16")
    return DType::kF16;
  return std::nullopt;
}

float f16_to_float(f16 h) {
  uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t mant = h.bits & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: value = mant * 2^-24, exact in float
      float v = std::ldexp(static_cast<float>(mant), -24);
      out = sign | float_bits(v);
    }
  } else if (exp == 0x1f) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  return bits_float(out);
}

f16 float_to_f16(float f) {
  uint32_t u = float_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16{static_cast<uint16_t>(sign | 0x7e00u)};   // NaN
  if (abs >= 0x477ff000u) return f16{static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520: inf
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    // value / 2^-24, rounded to nearest even by the FPU's default mode.
    float scaled = bits_float(abs) * 16777216.0f;  // exact: multiplying by 2^24
    float r = std::nearbyint(scaled);
    return f16{static_cast<uint16_t>(sign | static_cast<uint16_t>(r))};
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even.
  uint32_t lsb = (abs >> 13) & 1u;
  abs += 0xfffu + lsb;
  uint32_t h = (abs >> 13) - (112u << 10);
  return f16{static_cast<uint16_t>(sign | h)};
}

float round_to_dtype(float f, DType dtype) {
  switch (dtype) {
    case DType::kF32: return f;
    case DType::kBF16: return round_to_bf16(f);
    case DType::kF16: return round_to_f16(f);
  }
  return f;
}

void convert_from_f32(const float* src, void* dst, DType dst_dtype, size_t n) {
  switch (dst_dtype) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kBF16:
      detail::bf16_bulk_best().from_f32(src, static_cast<uint16_t*>(dst), n);
      return;
    case DType::kF16: {
      auto* d = static_cast<f16*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = float_to_f16(src[i]);
      return;
    }
  }
}

void convert_to_f32(const void* src, DType src_dtype, float* dst, size_t n) {
  switch (src_dtype) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kBF16:
      detail::bf16_bulk_best().to_f32(static_cast<const uint16_t*>(src), dst, n);
      return;
    case DType::kF16: {
      auto* s = static_cast<const f16*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_float(s[i]);
      return;
    }
  }
}

void round_to_dtype(const float* src, float* dst, size_t n, DType dtype) {
  switch (dtype) {
    case DType::kF32:
      if (dst != src) std::memmove(dst, src, n * 4);
      return;
    case DType::kBF16: detail::bf16_bulk_best().round(src, dst, n); return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) dst[i] = round_to_f16(src[i]);
      return;
  }
}

void accumulate_rounded(float* acc, const float* src, size_t n, DType dtype) {
  switch (dtype) {
    case DType::kF32:
      for (size_t i = 0; i < n; ++i) acc[i] += src[i];
      return;
    case DType::kBF16: detail::bf16_bulk_best().accumulate_rounded(acc, src, n); return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) acc[i] += round_to_f16(src[i]);
      return;
  }
}

namespace detail {
namespace {

void bf16_from_f32_scalar(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]).bits;
}
void bf16_to_f32_scalar(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(bf16{src[i]});
}
void bf16_round_scalar(const float* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = round_to_bf16(src[i]);
}
void bf16_accumulate_rounded_scalar(float* acc, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) acc[i] += round_to_bf16(src[i]);
}

const Bf16BulkFns kBf16BulkScalar = {bf16_from_f32_scalar, bf16_to_f32_scalar, bf16_round_scalar,
                                     bf16_accumulate_rounded_scalar};

}  // namespace

bool dtype_isa_supported(DTypeIsa isa) {
  // __builtin_cpu_supports also checks that the OS saves the YMM/ZMM state (XCR0).
  switch (isa) {
    case DTypeIsa::kScalar: return true;
    case DTypeIsa::kAvx2: return __builtin_cpu_supports("avx2");
    case DTypeIsa::kAvx512: return __builtin_cpu_supports("avx512f");
  }
  return false;
}

const Bf16BulkFns& bf16_bulk_fns(DTypeIsa isa) {
  switch (isa) {
    case DTypeIsa::kAvx512: return kBf16BulkAvx512;
    case DTypeIsa::kAvx2: return kBf16BulkAvx2;
    case DTypeIsa::kScalar: break;
  }
  return kBf16BulkScalar;
}

const Bf16BulkFns& bf16_bulk_best() {
  static const Bf16BulkFns& best = []() -> const Bf16BulkFns& {
    if (dtype_isa_supported(DTypeIsa::kAvx512)) return kBf16BulkAvx512;
    if (dtype_isa_supported(DTypeIsa::kAvx2)) return kBf16BulkAvx2;
    return kBf16BulkScalar;
  }();
  return best;
}

}  // namespace detail
}  // namespace zero
