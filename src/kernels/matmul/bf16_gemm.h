// bf16 GEMMs on the CPU through oneDNN's matmul primitive (its AVX512-BF16 brgemm kernels, what
// torch uses for CPU bf16 matmuls): inputs rounded to bf16, products accumulated in fp32, the
// fp32 result added into C. Used by the dense layers of bf16 models on CPUs with AVX512-BF16.
// Legend: m, n, k as in BLAS: c(m, n) += op(a)(m, k) · op(b)(k, n), row-major.
#pragma once

#include <cstdint>
#include <memory>

namespace zero::kernels::cpu {

class Bf16Gemm {
 public:
  // Whether this CPU runs bf16 dot products natively (avx512_bf16, and the OS saves ZMM state).
  // Without it oneDNN falls back to reference loops slower than fp32 OpenBLAS: callers keep fp32.
  static bool cpu_supported();

  // REQUIRES: cpu_supported().
  Bf16Gemm();
  ~Bf16Gemm();
  Bf16Gemm(const Bf16Gemm&) = delete;
  Bf16Gemm& operator=(const Bf16Gemm&) = delete;

  // c(m, n) += op(a) · op(b). op(a) = a (m, k) with row stride lda, or with trans_a a (k, m)
  // transposed; likewise op(b) from b (k, n) or, with trans_b, (n, k). a and b are rounded to bf16
  // (round to nearest even, as core/dtype.h's float_to_bf16) into scratch buffers owned here;
  // each output sums k bf16 × bf16 products in fp32 (exact products, order up to oneDNN).
  // Primitives are cached per shape. Not thread-safe: one instance per model; the GEMM itself
  // runs on the OpenMP threads.
  void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
            int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc);

  // Operands lying wholly inside [f32, f32 + numel) with a dense layout are read from `bf16` at the
  // same offset instead of being rounded again. REQUIRES: bf16[i] is the bf16 bit pattern of
  // f32[i] (f32 holds bf16 values widened exactly: a bf16 model's parameter unit), both valid
  // until the slot is cleared or set again. numel 0 clears the slot. Two slots: a block or final
  // unit and the tied embedding are held at once.
  static constexpr int kSourceSlots = 2;
  void set_bf16_source(int slot, const float* f32, const uint16_t* bf16, int64_t numel);

  // Allocates the bf16 scratch for operands a of up to a_numel and b of up to b_numel elements
  // now (memory planning counts it); a larger call still grows it.
  void reserve(int64_t a_numel, int64_t b_numel);
  // Bytes of bf16 scratch held now.
  int64_t scratch_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Rounds n floats to bf16 bit patterns (round to nearest even; NaN stays NaN with the quiet bit
// set, denormals kept): bitwise core/dtype.h's float_to_bf16. Parallel over OpenMP threads.
void round_to_bf16_bits(const float* src, uint16_t* dst, int64_t n);

}  // namespace zero::kernels::cpu
