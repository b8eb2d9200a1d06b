// The one SIMD body of the CPU Adam kernels (issue 10 item 7), written once over a vector-traits
// type V and instantiated by adamw_avx2.cc (8 lanes) and adamw_avx512.cc (16 lanes). Each
// includes this header after its target pragmas, so the code below is compiled for that ISA in
// that translation unit only. Operation order is adam_update's, unfused, so every width is
// bitwise equal to the scalar reference (adamw_simd_test).
//
// V provides: `reg` (fp32 vector), kLanes, load / store (unaligned), stream (non-temporal, aligned)
// and fence (orders streamed stores), set1, add, mul, div, sqrt, load_bf16 (kLanes bf16 values
// widened exactly) and store_bf16 / store_f16 (kLanes rounded 16-bit values, bitwise core/dtype.h).
//
// REQUIRES: included only from those two files (everything is in an unnamed namespace, one copy
// per ISA).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/adamw/adamw_tile.h"

namespace zero::kernels::cpu::detail {
namespace {

enum Out { kNone, kBf16, kF16 };

// The state arrays a tile works on: fp32 (float) or bf16 (uint16_t bits) master weights and
// moments (AdamShard's param / param_bf16, exp_avg* / exp_avg*_bf16).
template <class P, class M>
struct StatePtrs {
  P* param;
  M* exp_avg;
  M* exp_avg_sq;
};

// Loads and stores of a state vector: fp32 as is, bf16 widened exactly / rounded to nearest even.
template <class V>
inline typename V::reg load_state(const float* x) {
  return V::load(x);
}
template <class V>
inline typename V::reg load_state(const uint16_t* x) {
  return V::load_bf16(x);
}
template <class V>
inline void store_state(float* x, typename V::reg r) {
  V::store(x, r);
}
template <class V>
inline void store_state(uint16_t* x, typename V::reg r) {
  V::store_bf16(x, r);
}

template <class V>
struct Consts {
  typename V::reg b1, b2, omb1, omb2, eps, gs, step, isbc2, dd, l2;
  explicit Consts(const AdamConstants& c)
      : b1(V::set1(c.beta1)),
        b2(V::set1(c.beta2)),
        omb1(V::set1(c.one_minus_beta1)),
        omb2(V::set1(c.one_minus_beta2)),
        eps(V::set1(c.eps)),
        gs(V::set1(c.grad_scale)),
        step(V::set1(c.step_size)),
        isbc2(V::set1(c.inv_sqrt_bc2)),
        dd(V::set1(c.decoupled_decay)),
        l2(V::set1(c.l2_decay)) {}
};

// The optional outputs of a vector: the 16-bit copy and the values before the update (prev_*).
struct Outputs {
  uint16_t* out;
  float *prev_p, *prev_m, *prev_v;
};

// How a vector stores the prev_* copy: not at all, plainly, or streaming (non-temporal: the copy
// is read only on a rollback, so it bypasses the caches and skips each line's read for ownership;
// REQUIRES prev_* + i aligned to the vector's bytes). Only an fp32 state has one.
enum Save { kNoSave, kSavePlain, kSaveStream };

// One vector of V::kLanes elements, in adam_update's operation order.
template <class V, bool kL2, bool kDecoupled, Out kOut, Save kSave, class P, class M>
inline void step_vector(const Consts<V>& k, P* p, const float* g, M* m, M* v, const Outputs& o) {
  using R = typename V::reg;
  R gv = V::mul(V::load(g), k.gs);
  R pv = load_state<V>(p);
  const R m0 = load_state<V>(m);
  const R v0 = load_state<V>(v);
  if constexpr (kSave == kSavePlain) {
    V::store(o.prev_p, pv);
    V::store(o.prev_m, m0);
    V::store(o.prev_v, v0);
  }
  if constexpr (kSave == kSaveStream) {
    V::stream(o.prev_p, pv);
    V::stream(o.prev_m, m0);
    V::stream(o.prev_v, v0);
  }
  if constexpr (kL2) gv = V::add(gv, V::mul(k.l2, pv));
  const R mv = V::add(V::mul(k.b1, m0), V::mul(k.omb1, gv));
  const R vv = V::add(V::mul(k.b2, v0), V::mul(k.omb2, V::mul(gv, gv)));
  const R denom = V::add(V::mul(V::sqrt(vv), k.isbc2), k.eps);
  if constexpr (kDecoupled) pv = V::add(pv, V::mul(k.dd, pv));
  pv = V::add(pv, V::mul(k.step, V::div(mv, denom)));
  store_state<V>(p, pv);
  store_state<V>(m, mv);
  store_state<V>(v, vv);
  if constexpr (kOut == kBf16) V::store_bf16(o.out, pv);
  if constexpr (kOut == kF16) V::store_f16(o.out, pv);
}

// Elements [i, end), at most one vector: the same vector code on zero-padded copies (the padding
// lanes are discarded).
template <class V, bool kL2, bool kDecoupled, Out kOut, bool kSave, class P, class M>
void ragged(const Consts<V>& k, const AdamShard& s, StatePtrs<P, M> st, int64_t i, int64_t end) {
  constexpr int64_t kLanes = V::kLanes;
  if (i == end) return;
  const size_t n = static_cast<size_t>(end - i);
  alignas(64) P tp[kLanes] = {};
  alignas(64) M tm[kLanes] = {}, tv[kLanes] = {};
  alignas(64) float tg[kLanes] = {};
  alignas(64) float sp[kLanes], sm[kLanes], sv[kLanes];
  alignas(64) uint16_t to[kLanes];
  std::memcpy(tp, st.param + i, n * sizeof(P));
  std::memcpy(tg, s.grad + i, n * 4);
  std::memcpy(tm, st.exp_avg + i, n * sizeof(M));
  std::memcpy(tv, st.exp_avg_sq + i, n * sizeof(M));
  step_vector<V, kL2, kDecoupled, kOut, kSave ? kSavePlain : kNoSave>(k, tp, tg, tm, tv,
                                                                      Outputs{to, sp, sm, sv});
  std::memcpy(st.param + i, tp, n * sizeof(P));
  std::memcpy(st.exp_avg + i, tm, n * sizeof(M));
  std::memcpy(st.exp_avg_sq + i, tv, n * sizeof(M));
  if constexpr (kOut != kNone) std::memcpy(static_cast<uint16_t*>(s.param_16bit) + i, to, n * 2);
  if constexpr (kSave) {
    std::memcpy(s.prev_param + i, sp, n * 4);
    std::memcpy(s.prev_exp_avg + i, sm, n * 4);
    std::memcpy(s.prev_exp_avg_sq + i, sv, n * 4);
  }
}

template <class V, bool kL2, bool kDecoupled, Out kOut, Save kSave, class P, class M>
int64_t vector_loop(const Consts<V>& k, const AdamShard& s, StatePtrs<P, M> st, int64_t i,
                    int64_t end) {
  constexpr int64_t kLanes = V::kLanes;
  auto* out = static_cast<uint16_t*>(s.param_16bit);
  constexpr bool kAny = kSave != kNoSave;
  for (; i + kLanes <= end; i += kLanes) {
    const Outputs o{kOut == kNone ? nullptr : out + i, kAny ? s.prev_param + i : nullptr,
                    kAny ? s.prev_exp_avg + i : nullptr, kAny ? s.prev_exp_avg_sq + i : nullptr};
    step_vector<V, kL2, kDecoupled, kOut, kSave>(k, st.param + i, s.grad + i, st.exp_avg + i,
                                                 st.exp_avg_sq + i, o);
  }
  return i;
}

template <class V, bool kL2, bool kDecoupled, Out kOut, bool kSave, class P, class M>
void tile_loop(const Consts<V>& k, const AdamShard& s, StatePtrs<P, M> st, int64_t begin,
               int64_t end) {
  int64_t i = begin;
  if constexpr (kSave) {
    // Streaming stores need every prev_* vector aligned: possible when the three copies share
    // their misalignment (the engine's rollback buffer lays them out so); the elements before
    // the first aligned vector go through the ragged path.
    constexpr uintptr_t kAlign = V::kLanes * sizeof(float);
    const auto misalignment = [](const float* q) {
      return reinterpret_cast<uintptr_t>(q) % kAlign;
    };
    const uintptr_t mis = misalignment(s.prev_param + i);
    if (mis % sizeof(float) == 0 && misalignment(s.prev_exp_avg + i) == mis &&
        misalignment(s.prev_exp_avg_sq + i) == mis) {
      // (No std::min: a library inline compiled under this file's target pragmas could be the
      // copy the linker keeps for baseline code.)
      const int64_t to_aligned = static_cast<int64_t>((kAlign - mis) % kAlign / sizeof(float));
      const int64_t head = to_aligned < end - i ? to_aligned : end - i;
      ragged<V, kL2, kDecoupled, kOut, true>(k, s, st, i, i + head);
      i = vector_loop<V, kL2, kDecoupled, kOut, kSaveStream>(k, s, st, i + head, end);
      // The streamed lines are ordered before whatever this thread stores next (the OpenMP
      // barrier, the worker's hand-off), so a reader of the copy sees them.
      V::fence();
    } else {
      i = vector_loop<V, kL2, kDecoupled, kOut, kSavePlain>(k, s, st, i, end);
    }
  } else {
    i = vector_loop<V, kL2, kDecoupled, kOut, kNoSave>(k, s, st, i, end);
  }
  ragged<V, kL2, kDecoupled, kOut, kSave>(k, s, st, i, end);
}

template <class V, bool kL2, bool kDecoupled, bool kSave, class P, class M>
void by_out(const Consts<V>& k, const AdamShard& s, StatePtrs<P, M> st, int64_t begin,
            int64_t end) {
  if (s.param_16bit == nullptr) {
    tile_loop<V, kL2, kDecoupled, kNone, kSave>(k, s, st, begin, end);
  } else if (s.param_16bit_dtype == DType::kBF16) {
    tile_loop<V, kL2, kDecoupled, kBf16, kSave>(k, s, st, begin, end);
  } else if constexpr (std::is_same_v<P, float>) {  // (f16 copies of fp32 masters only)
    tile_loop<V, kL2, kDecoupled, kF16, kSave>(k, s, st, begin, end);
  }
}

template <class V, bool kSave, class P, class M>
void by_decay(const AdamConstants& c, const Consts<V>& k, const AdamShard& s, StatePtrs<P, M> st,
              int64_t begin, int64_t end) {
  if (c.l2) {
    by_out<V, true, false, kSave>(k, s, st, begin, end);
  } else if (c.decoupled) {
    by_out<V, false, true, kSave>(k, s, st, begin, end);
  } else {
    by_out<V, false, false, kSave>(k, s, st, begin, end);
  }
}

// Elements [begin, end) of `s`: the state dtypes, decay, 16-bit copy and prev_* variants picked
// once, compiled out when unused.
template <class V>
void adam_tile(const AdamConstants& c, const AdamShard& s, int64_t begin, int64_t end) {
  const Consts<V> k(c);
  auto* p16 = reinterpret_cast<uint16_t*>(s.param_bf16);
  if (s.bf16_moments()) {
    const StatePtrs<uint16_t, uint16_t> st{p16, reinterpret_cast<uint16_t*>(s.exp_avg_bf16),
                                           reinterpret_cast<uint16_t*>(s.exp_avg_sq_bf16)};
    by_decay<V, false>(c, k, s, st, begin, end);
  } else if (s.bf16_master()) {
    by_decay<V, false>(c, k, s, StatePtrs<uint16_t, float>{p16, s.exp_avg, s.exp_avg_sq}, begin,
                       end);
  } else if (s.saves_prev()) {
    by_decay<V, true>(c, k, s, StatePtrs<float, float>{s.param, s.exp_avg, s.exp_avg_sq}, begin,
                      end);
  } else {
    by_decay<V, false>(c, k, s, StatePtrs<float, float>{s.param, s.exp_avg, s.exp_avg_sq}, begin,
                       end);
  }
}

}  // namespace
}  // namespace zero::kernels::cpu::detail
