// The body of vector_math.h, written once over a vector-traits type V and included by the
// AVX-512 and AVX2 translation units inside their target pragmas. V provides: reg, kLanes, load,
// store, set1, add, sub, mul, div, fmadd (a·b + c), fnmadd (c − a·b), max, min, round (to nearest
// even), hmax (lane max), pow2 (2^n for integral n in [-150, 129] held as floats, as 2^(n/2) · 2^(n
// − n/2) so the final product rounds once into the subnormal range), hsum (fp32 lane sum), and an
// fp64 accumulator: Acc64, acc64_zero, acc64_add, acc64_sum. No include guard on purpose: each ISA
// file includes it once, in its own namespace.

// Cephes expf: x = n ln2 + r, |r| <= ln2/2, exp(r) = 1 + r + r² P(r).
template <typename V>
typename V::reg exp_v(typename V::reg x) {
  using reg = typename V::reg;
  // Below -104 the result rounds to 0; above 89 it overflows to inf. NaN passes through (the
  // clamps return their second operand when it is NaN).
  x = V::max(V::set1(-104.0f), x);
  x = V::min(V::set1(89.0f), x);
  const reg n = V::round(V::mul(x, V::set1(1.44269504088896341f)));
  reg r = V::fnmadd(n, V::set1(0.693359375f), x);
  r = V::fnmadd(n, V::set1(-2.12194440e-4f), r);
  const reg r2 = V::mul(r, r);
  reg p = V::set1(1.9875691500e-4f);
  p = V::fmadd(p, r, V::set1(1.3981999507e-3f));
  p = V::fmadd(p, r, V::set1(8.3334519073e-3f));
  p = V::fmadd(p, r, V::set1(4.1665795894e-2f));
  p = V::fmadd(p, r, V::set1(1.6666665459e-1f));
  p = V::fmadd(p, r, V::set1(5.0000001201e-1f));
  p = V::fmadd(p, r2, r);
  p = V::add(p, V::set1(1.0f));
  return V::pow2(p, n);
}

// Runs body(const float* in, float* out) over full vectors, then once over a padded copy of the
// tail (pad value `pad`); returns the number of valid lanes of that last call (0: no tail).
template <typename V, typename Body>
void for_each_vector(const float* in, float* out, int64_t n, float pad, Body&& body) {
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) body(in + i, out + i, V::kLanes);
  if (i < n) {
    float tail_in[V::kLanes], tail_out[V::kLanes];
    for (int64_t j = 0; j < V::kLanes; ++j) tail_in[j] = i + j < n ? in[i + j] : pad;
    body(tail_in, tail_out, n - i);
    for (int64_t j = 0; i + j < n; ++j) out[i + j] = tail_out[j];
  }
}

template <typename V>
void vector_exp_impl(float* out, const float* x, int64_t n) {
  for_each_vector<V>(x, out, n, 0.0f, [](const float* in, float* o, int64_t) {
    V::store(o, exp_v<V>(V::load(in)));
  });
}

template <typename V>
float vector_max_impl(const float* x, int64_t n) {
  typename V::reg acc = V::set1(-__builtin_inff());
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) acc = V::max(acc, V::load(x + i));
  float m = V::hmax(acc);
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

template <typename V>
float exp_shifted_sum_inplace_impl(float* x, int64_t n, float shift) {
  using reg = typename V::reg;
  const reg s = V::set1(shift);
  reg acc = V::set1(0.0f);
  for_each_vector<V>(x, x, n, shift, [&](const float* in, float* o, int64_t valid) {
    reg e = exp_v<V>(V::sub(V::load(in), s));
    if (valid < V::kLanes) {  // padded lanes (exp(0) = 1) must not count
      V::store(o, e);
      for (int64_t j = valid; j < V::kLanes; ++j) o[j] = 0.0f;
      e = V::load(o);
    }
    V::store(o, e);
    acc = V::add(acc, e);
  });
  return V::hsum(acc);
}

template <typename V>
double exp_shifted_sum_f64_impl(const float* x, int64_t n, float shift) {
  using reg = typename V::reg;
  const reg s = V::set1(shift);
  typename V::Acc64 acc = V::acc64_zero();
  // Full vectors only here (no store); the tail is summed lane by lane below.
  int64_t i = 0;
  for (; i + V::kLanes <= n; i += V::kLanes) {
    V::acc64_add(acc, exp_v<V>(V::sub(V::load(x + i), s)));
  }
  double sum = V::acc64_sum(acc);
  if (i < n) {
    float tail[V::kLanes];
    for (int64_t j = 0; j < V::kLanes; ++j) tail[j] = i + j < n ? x[i + j] : shift;
    V::store(tail, exp_v<V>(V::sub(V::load(tail), s)));
    for (int64_t j = 0; i + j < n; ++j) sum += tail[j];
  }
  return sum;
}

template <typename V>
void exp_shifted_scaled_impl(float* out, const float* x, int64_t n, float shift, float scale) {
  using reg = typename V::reg;
  const reg s = V::set1(shift), k = V::set1(scale);
  for_each_vector<V>(x, out, n, shift, [&](const float* in, float* o, int64_t) {
    V::store(o, V::mul(exp_v<V>(V::sub(V::load(in), s)), k));
  });
}

// e = exp(-2u), clamped to exp(88) so that 1 + e, s and s² e stay finite for very negative x
// (where GELU and its gradient are below 1e-37 anyway).
template <typename V>
typename V::reg gelu_exp_minus_2u(typename V::reg x) {
  using reg = typename V::reg;
  const reg x3 = V::mul(V::mul(x, x), x);
  const reg u = V::mul(V::set1(0.7978845608028654f), V::fmadd(V::set1(0.044715f), x3, x));
  return exp_v<V>(V::min(V::set1(88.0f), V::mul(V::set1(-2.0f), u)));
}

template <typename V>
void gelu_tanh_forward_impl(float* out, const float* inp, int64_t n) {
  for_each_vector<V>(inp, out, n, 0.0f, [](const float* in, float* o, int64_t) {
    const auto x = V::load(in);
    V::store(o, V::div(x, V::add(V::set1(1.0f), gelu_exp_minus_2u<V>(x))));
  });
}

template <typename V>
void gelu_tanh_backward_impl(float* dinp, const float* inp, const float* dout, int64_t n) {
  using reg = typename V::reg;
  int64_t i = 0;
  auto step = [](const float* x_p, const float* dout_p, float* dinp_p) {
    const reg x = V::load(x_p);
    const reg e = gelu_exp_minus_2u<V>(x);
    const reg s = V::div(V::set1(1.0f), V::add(V::set1(1.0f), e));  // sigmoid(2u)
    const reg du_dx = V::mul(V::set1(0.7978845608028654f),
                             V::fmadd(V::set1(3.0f * 0.044715f), V::mul(x, x), V::set1(1.0f)));
    // s (1 - s) = s² e, without the cancellation of 1 - s.
    const reg grad = V::fmadd(V::mul(V::mul(V::set1(2.0f), x), du_dx), V::mul(V::mul(s, s), e), s);
    V::store(dinp_p, V::fmadd(grad, V::load(dout_p), V::load(dinp_p)));
  };
  for (; i + V::kLanes <= n; i += V::kLanes) step(inp + i, dout + i, dinp + i);
  if (i < n) {
    float x_t[V::kLanes] = {}, dout_t[V::kLanes] = {}, dinp_t[V::kLanes] = {};
    for (int64_t j = 0; i + j < n; ++j) {
      x_t[j] = inp[i + j];
      dout_t[j] = dout[i + j];
      dinp_t[j] = dinp[i + j];
    }
    step(x_t, dout_t, dinp_t);
    for (int64_t j = 0; i + j < n; ++j) dinp[i + j] = dinp_t[j];
  }
}
