// oneDNN matmul behind Bf16Gemm (bf16_gemm.h): fp32 operands rounded to bf16 scratch buffers, one
// cached matmul primitive per shape, a sum post-op for C += (BLAS beta = 1).
#include "kernels/matmul/bf16_gemm.h"

// GCC 12 reports its own _mm512 helpers as maybe-uninitialized (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <dnnl.hpp>
#include <map>
#include <tuple>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"

namespace zero::kernels::cpu {
namespace {

bool cpu_has_avx512bw() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
}

// 16 lanes of float_to_bf16 in integer math. VCVTNEPS2BF16 is not used: it flushes denormal
// inputs to zero, which float_to_bf16 does not.
__attribute__((target("avx512f,avx512bw"))) void round_block_avx512(const float* src, uint16_t* dst,
                                                                    int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(src + i);
    const __m512i u = _mm512_castps_si512(x);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(r));
  }
  for (; i < n; ++i) dst[i] = float_to_bf16(src[i]).bits;
}

// Rounds a (rows, cols) matrix with row stride ld into a dense (rows, cols) bf16 buffer.
void round_matrix(const float* src, int64_t rows, int64_t cols, int64_t ld, uint16_t* dst) {
  if (ld == cols) {
    round_to_bf16_bits(src, dst, rows * cols);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) dst[r * cols + j] = float_to_bf16(src[r * ld + j]).bits;
  }
}

}  // namespace

void round_to_bf16_bits(const float* src, uint16_t* dst, int64_t n) {
  // Blocks of 4096 elements (16 KiB in, 8 KiB out) per OpenMP iteration.
  constexpr int64_t kBlock = 4096;
  const int64_t num_blocks = (n + kBlock - 1) / kBlock;
  const bool simd = cpu_has_avx512bw();
#pragma omp parallel for schedule(static) if (num_blocks > 1)
  for (int64_t blk = 0; blk < num_blocks; ++blk) {
    const int64_t begin = blk * kBlock;
    const int64_t len = n - begin < kBlock ? n - begin : kBlock;
    if (simd) {
      round_block_avx512(src + begin, dst + begin, len);
    } else {
      for (int64_t i = 0; i < len; ++i) dst[begin + i] = float_to_bf16(src[begin + i]).bits;
    }
  }
}

bool Bf16Gemm::cpu_supported() {
  // __builtin_cpu_supports also checks that the OS saves the ZMM state (XCR0).
  return cpu_has_avx512bw() && __builtin_cpu_supports("avx512bf16");
}

struct Bf16Gemm::Impl {
  using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t>;  // ta, tb, m, n, k, ldc
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, dnnl::matmul> primitives;
  std::vector<uint16_t> a_bf16, b_bf16;  // dense op(a) / op(b) storage, as stored (not transposed)
  struct Source {
    const float* f32 = nullptr;
    const uint16_t* bf16 = nullptr;
    int64_t numel = 0;
  };
  Source sources[kSourceSlots];

  // The bf16 copy of a dense (rows, cols) operand at src with row stride ld, if a source holds it.
  const uint16_t* source_of(const float* src, int64_t rows, int64_t cols, int64_t ld) const {
    if (ld != cols) return nullptr;
    for (const Source& s : sources) {
      if (s.numel == 0 || src < s.f32 || src >= s.f32 + s.numel) continue;
      const int64_t offset = src - s.f32;
      if (rows * cols <= s.numel - offset) return s.bf16 + offset;
    }
    return nullptr;
  }
  // op's bf16 storage: the source's copy, or `scratch` with src rounded into it.
  uint16_t* bf16_operand(const float* src, int64_t rows, int64_t cols, int64_t ld,
                         std::vector<uint16_t>& scratch) const {
    if (const uint16_t* copy = source_of(src, rows, cols, ld)) {
      return const_cast<uint16_t*>(copy);  // oneDNN only reads src and weights
    }
    round_matrix(src, rows, cols, ld, scratch.data());
    return scratch.data();
  }

  dnnl::matmul& primitive(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t ldc) {
    const Key key{ta, tb, m, n, k, ldc};
    auto it = primitives.find(key);
    if (it != primitives.end()) return it->second;
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    // Transposed operands are described by their strides (format "ba"): oneDNN's brgemm reads
    // them in place, so the scratch copies keep the caller's layout.
    const dnnl::memory::desc a_md({m, k}, dt::bf16, ta ? tag::ba : tag::ab);
    const dnnl::memory::desc b_md({k, n}, dt::bf16, tb ? tag::ba : tag::ab);
    const dnnl::memory::desc c_md({m, n}, dt::f32, dnnl::memory::dims{ldc, 1});
    dnnl::post_ops ops;
    ops.append_sum(1.0f);  // C += A·B
    dnnl::primitive_attr attr;
    attr.set_post_ops(ops);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine);
    return primitives.emplace(key, dnnl::matmul(pd)).first->second;
  }
};

Bf16Gemm::Bf16Gemm() : impl_(std::make_unique<Impl>()) {
  ZERO_CHECK(cpu_supported(), "Bf16Gemm needs a CPU with AVX512-BF16");
}
Bf16Gemm::~Bf16Gemm() = default;

void Bf16Gemm::reserve(int64_t a_numel, int64_t b_numel) {
  impl_->a_bf16.resize(std::max(impl_->a_bf16.size(), static_cast<size_t>(a_numel)));
  impl_->b_bf16.resize(std::max(impl_->b_bf16.size(), static_cast<size_t>(b_numel)));
}

void Bf16Gemm::set_bf16_source(int slot, const float* f32, const uint16_t* bf16, int64_t numel) {
  ZERO_CHECK(slot >= 0 && slot < kSourceSlots, "Bf16Gemm source slot ", slot);
  impl_->sources[slot] = Impl::Source{f32, bf16, numel};
}

int64_t Bf16Gemm::scratch_bytes() const {
  return static_cast<int64_t>((impl_->a_bf16.size() + impl_->b_bf16.size()) * sizeof(uint16_t));
}

void Bf16Gemm::gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                    int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  if (m == 0 || n == 0 || k == 0) return;
  Impl& s = *impl_;
  reserve(m * k, k * n);
  // Stored shapes: a is (m, k) or, transposed, (k, m); b is (k, n) or (n, k).
  uint16_t* a_bits = s.bf16_operand(a, trans_a ? k : m, trans_a ? m : k, lda, s.a_bf16);
  uint16_t* b_bits = s.bf16_operand(b, trans_b ? n : k, trans_b ? k : n, ldb, s.b_bf16);
  try {
    dnnl::matmul& mm = s.primitive(trans_a, trans_b, m, n, k, ldc);
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    dnnl::memory a_mem({{m, k}, dt::bf16, trans_a ? tag::ba : tag::ab}, s.engine, a_bits);
    dnnl::memory b_mem({{k, n}, dt::bf16, trans_b ? tag::ba : tag::ab}, s.engine, b_bits);
    dnnl::memory c_mem({{m, n}, dt::f32, dnnl::memory::dims{ldc, 1}}, s.engine, c);
    mm.execute(s.stream, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
    s.stream.wait();  // why: the scratch buffers are reused by the next call
  } catch (const dnnl::error& e) {
    ZERO_CHECK(false, "oneDNN bf16 matmul (m=", m, " n=", n, " k=", k, ") failed: ", e.what());
  }
}

}  // namespace zero::kernels::cpu
