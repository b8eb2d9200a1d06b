// Test helpers for kernels: deterministic random fills and fp64 finite-difference gradient checks.
// Header-only; used by the *_test.cc files beside each op.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace zero::kernels::testing {

// Uniform values in [lo, hi) from a fixed seed.
inline std::vector<double> random_vector(int64_t n, uint64_t seed, double lo = -1.0,
                                         double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<float> to_float(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// Central finite difference of a scalar loss L(x) w.r.t. every element of `x` (modified in place
// and restored). Step h is relative to the magnitude: h = eps * max(1, |x_i|).
inline std::vector<double> numeric_grad(std::vector<double>& x, const std::function<double()>& loss,
                                        double eps = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double orig = x[i];
    double h = eps * std::max(1.0, std::fabs(orig));
    x[i] = orig + h;
    double lp = loss();
    x[i] = orig - h;
    double lm = loss();
    x[i] = orig;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

// max |a - b| / max(1e-12, max |b|): an error relative to the reference's scale.
inline double max_rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 1e-12;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / den;
}

// Σ w_i * y_i: a random projection turning a tensor output into a scalar loss for gradient checks.
inline double dot(const std::vector<double>& w, const double* y, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += w[i] * y[i];
  return s;
}

}  // namespace zero::kernels::testing
