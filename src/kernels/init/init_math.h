// The random initialisation's numbers (model/init.h), computed alike on the host and on a GPU:
// element i of a parameter is a pure function of (key, i) — splitmix64 hashing, then one
// Box-Muller normal per pair of uniforms — so a unit can be initialised in any shard, on any
// thread, on either side, and the bits agree.
//
// Why not std::log / std::cos: libm and CUDA's math library may round their last bit differently,
// and a differing double bit changes the float about once in 2^29 elements: a 13B model would start
// from different weights on a GPU than on the host. Here log and cos are polynomials written with
// operations that IEEE rounds alike on both sides: +, *, / and sqrt correctly rounded, frexp and
// floor exact, no fused multiply-add anywhere (d_add / d_mul keep nvcc from contracting a*b+c; the
// host build targets baseline x86-64, which has no fused multiply-add to contract into, and the
// emulator builds with -ffp-contract=off). Accuracy: a few units in the last place of double, far
// below the float the value is stored in (tested against std::log / std::cos).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"

namespace zero::kernels::init {

ZERO_HOST_DEVICE uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

ZERO_HOST_DEVICE double d_add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

ZERO_HOST_DEVICE double d_mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

// Uniform in (0, 1], from the top 53 bits (every step exact).
ZERO_HOST_DEVICE double to_unit(uint64_t bits) {
  return static_cast<double>((bits >> 11) + 1) * 0x1.0p-53;
}

// log(u) for u in (0, 1]: u = m 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s),
// s = (m - 1) / (m + 1), |s| <= 0.1716, by its odd series to s^25 (the next term < 1e-19 of it).
ZERO_HOST_DEVICE double det_log(double u) {
  // 1 / (2j + 1), j = 0..12, each the double nearest.
  constexpr double kInvOdd[13] = {0x1.0000000000000p+0, 0x1.5555555555555p-2, 0x1.999999999999ap-3,
                                  0x1.2492492492492p-3, 0x1.c71c71c71c71cp-4, 0x1.745d1745d1746p-4,
                                  0x1.3b13b13b13b14p-4, 0x1.1111111111111p-4, 0x1.e1e1e1e1e1e1ep-5,
                                  0x1.af286bca1af28p-5, 0x1.8618618618618p-5, 0x1.642c8590b2164p-5,
                                  0x1.47ae147ae147bp-5};
  // ln 2 = kLn2Hi + kLn2Lo; kLn2Hi has 33 significant bits, so e * kLn2Hi is exact.
  constexpr double kLn2Hi = 0x1.62e42fefp-1;
  constexpr double kLn2Lo = 0x1.473de6af278edp-34;
  int e = 0;
  double m = std::frexp(u, &e);    // exact: m in [0.5, 1)
  if (m < 0x1.6a09e667f3bcdp-1) {  // sqrt(1/2)
    m = d_mul(m, 2.0);             // exact
    e -= 1;
  }
  const double s = (m - 1.0) / d_add(m, 1.0);  // m - 1 exact (Sterbenz)
  const double s2 = d_mul(s, s);
  double p = kInvOdd[12];
  for (int j = 11; j >= 0; --j) p = d_add(d_mul(p, s2), kInvOdd[j]);
  const double log_m = d_mul(d_mul(2.0, s), p);
  const double ed = static_cast<double>(e);
  return d_add(d_mul(ed, kLn2Hi), d_add(d_mul(ed, kLn2Lo), log_m));
}

// cos(2 pi t) for t in [0, 1]: the nearest quarter turn k = round(4 t) is taken out exactly
// (f = 4 t - k in [-1/2, 1/2]), r = f pi/2 in [-pi/4, pi/4], and cos / sin of r by their Taylor
// series to r^18 / r^19 (the next terms < 3e-18).
ZERO_HOST_DEVICE double det_cos_turns(double t) {
  // (-1)^n / (2n)! and (-1)^n / (2n + 1)!, n = 0..9, each the double nearest.
  constexpr double kCos[10] = {
      0x1.0000000000000p+0,  -0x1.0000000000000p-1,  0x1.5555555555555p-5,  -0x1.6c16c16c16c17p-10,
      0x1.a01a01a01a01ap-16, -0x1.27e4fb7789f5cp-22, 0x1.1eed8eff8d898p-29, -0x1.93974a8c07c9dp-37,
      0x1.ae7f3e733b81fp-45, -0x1.6827863b97d97p-53};
  constexpr double kSin[10] = {
      0x1.0000000000000p+0,  -0x1.5555555555555p-3,  0x1.1111111111111p-7,  -0x1.a01a01a01a01ap-13,
      0x1.71de3a556c734p-19, -0x1.ae64567f544e4p-26, 0x1.6124613a86d09p-33, -0x1.ae7f3e733b81fp-41,
      0x1.952c77030ad4ap-49, -0x1.2f49b46814157p-57};
  const double t4 = d_mul(t, 4.0);  // exact
  const double k = std::floor(d_add(t4, 0.5));
  const double f = t4 - k;                          // exact
  const double r = d_mul(f, 0x1.921fb54442d18p+0);  // pi / 2
  const double r2 = d_mul(r, r);
  double c = kCos[9], s = kSin[9];
  for (int n = 8; n >= 0; --n) {
    c = d_add(d_mul(c, r2), kCos[n]);
    s = d_add(d_mul(s, r2), kSin[n]);
  }
  s = d_mul(s, r);
  const int quadrant = static_cast<int>(k) & 3;
  if (quadrant == 0) return c;
  if (quadrant == 1) return -s;
  if (quadrant == 2) return -c;
  return s;
}

// A standard normal for element i of the stream `key` (one value per pair of uniforms).
ZERO_HOST_DEVICE double normal_at(uint64_t key, int64_t i) {
  const uint64_t base = splitmix64(key ^ splitmix64(static_cast<uint64_t>(i)));
  const double u1 = to_unit(splitmix64(base));
  const double u2 = to_unit(splitmix64(base + 1));
  return d_mul(std::sqrt(d_mul(-2.0, det_log(u1))), det_cos_turns(u2));
}

// The stored value: std_dev * normal, rounded once to float.
ZERO_HOST_DEVICE float scaled_normal_at(uint64_t key, int64_t i, double std_dev) {
  return static_cast<float>(d_mul(std_dev, normal_at(key, i)));
}

}  // namespace zero::kernels::init
