// The one SIMD body of the CPU Adam kernels (issue 10 item 7), written once over a vector-traits
// type V and instantiated by adamw_avx2.cc (8 lanes) and adamw_avx512.cc (16 lanes). Each
// includes this header after its target pragmas, so the code below is compiled for that ISA in
// that translation unit only. Operation order is adam_update's, unfused, so every width is
// bitwise equal to the scalar reference (adamw_simd_test).
//
// V provides: `reg` (fp32 vector), kLanes, load / store (unaligned), stream (non-temporal, aligned)
// and fence (orders streamed stores), set1, add, mul, div, sqrt, and store_bf16 / store_f16 (kLanes
// rounded 16-bit values, bitwise core/dtype.h).
//
// REQUIRES: included only from those two files (everything is in an unnamed namespace, one copy
// per ISA).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/adamw/adamw_tile.h"

namespace zero::kernels::cpu::detail {
namespace {

enum Out { kNone, kBf16, kF16 };

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
// REQUIRES prev_* + i aligned to the vector's bytes).
enum Save { kNoSave, kSavePlain, kSaveStream };

// One vector of V::kLanes elements, in adam_update's operation order.
template <class V, bool kL2, bool kDecoupled, Out kOut, Save kSave>
inline void step_vector(const Consts<V>& k, float* p, const float* g, float* m, float* v,
                        const Outputs& o) {
  using R = typename V::reg;
  R gv = V::mul(V::load(g), k.gs);
  R pv = V::load(p);
  const R m0 = V::load(m);
  const R v0 = V::load(v);
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
  V::store(p, pv);
  V::store(m, mv);
  V::store(v, vv);
  if constexpr (kOut == kBf16) V::store_bf16(o.out, pv);
  if constexpr (kOut == kF16) V::store_f16(o.out, pv);
}

// Elements [i, end), at most one vector: the same vector code on zero-padded copies (the padding
// lanes are discarded).
template <class V, bool kL2, bool kDecoupled, Out kOut, bool kSave>
void ragged(const Consts<V>& k, const AdamShard& s, int64_t i, int64_t end) {
  constexpr int64_t kLanes = V::kLanes;
  if (i == end) return;
  const size_t n = static_cast<size_t>(end - i);
  alignas(64) float tp[kLanes] = {}, tg[kLanes] = {}, tm[kLanes] = {}, tv[kLanes] = {};
  alignas(64) float sp[kLanes], sm[kLanes], sv[kLanes];
  alignas(64) uint16_t to[kLanes];
  std::memcpy(tp, s.param + i, n * 4);
  std::memcpy(tg, s.grad + i, n * 4);
  std::memcpy(tm, s.exp_avg + i, n * 4);
  std::memcpy(tv, s.exp_avg_sq + i, n * 4);
  step_vector<V, kL2, kDecoupled, kOut, kSave ? kSavePlain : kNoSave>(k, tp, tg, tm, tv,
                                                                      Outputs{to, sp, sm, sv});
  std::memcpy(s.param + i, tp, n * 4);
  std::memcpy(s.exp_avg + i, tm, n * 4);
  std::memcpy(s.exp_avg_sq + i, tv, n * 4);
  if constexpr (kOut != kNone) std::memcpy(static_cast<uint16_t*>(s.param_16bit) + i, to, n * 2);
  if constexpr (kSave) {
    std::memcpy(s.prev_param + i, sp, n * 4);
    std::memcpy(s.prev_exp_avg + i, sm, n * 4);
    std::memcpy(s.prev_exp_avg_sq + i, sv, n * 4);
  }
}

template <class V, bool kL2, bool kDecoupled, Out kOut, Save kSave>
int64_t vector_loop(const Consts<V>& k, const AdamShard& s, int64_t i, int64_t end) {
  constexpr int64_t kLanes = V::kLanes;
  auto* out = static_cast<uint16_t*>(s.param_16bit);
  constexpr bool kAny = kSave != kNoSave;
  for (; i + kLanes <= end; i += kLanes) {
    const Outputs o{kOut == kNone ? nullptr : out + i, kAny ? s.prev_param + i : nullptr,
                    kAny ? s.prev_exp_avg + i : nullptr, kAny ? s.prev_exp_avg_sq + i : nullptr};
    step_vector<V, kL2, kDecoupled, kOut, kSave>(k, s.param + i, s.grad + i, s.exp_avg + i,
                                                 s.exp_avg_sq + i, o);
  }
  return i;
}

template <class V, bool kL2, bool kDecoupled, Out kOut, bool kSave>
void tile_loop(const Consts<V>& k, const AdamShard& s, int64_t begin, int64_t end) {
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
      ragged<V, kL2, kDecoupled, kOut, true>(k, s, i, i + head);
      i = vector_loop<V, kL2, kDecoupled, kOut, kSaveStream>(k, s, i + head, end);
      // The streamed lines are ordered before whatever this thread stores next (the OpenMP
      // barrier, the worker's hand-off), so a reader of the copy sees them.
      V::fence();
    } else {
      i = vector_loop<V, kL2, kDecoupled, kOut, kSavePlain>(k, s, i, end);
    }
  } else {
    i = vector_loop<V, kL2, kDecoupled, kOut, kNoSave>(k, s, i, end);
  }
  ragged<V, kL2, kDecoupled, kOut, kSave>(k, s, i, end);
}

template <class V, bool kL2, bool kDecoupled, bool kSave>
void by_out(const Consts<V>& k, const AdamShard& s, int64_t begin, int64_t end) {
  if (s.param_16bit == nullptr) {
    tile_loop<V, kL2, kDecoupled, kNone, kSave>(k, s, begin, end);
  } else if (s.param_16bit_dtype == DType::kBF16) {
    tile_loop<V, kL2, kDecoupled, kBf16, kSave>(k, s, begin, end);
  } else {
    tile_loop<V, kL2, kDecoupled, kF16, kSave>(k, s, begin, end);
  }
}

template <class V, bool kSave>
void by_decay(const AdamConstants& c, const Consts<V>& k, const AdamShard& s, int64_t begin,
              int64_t end) {
  if (c.l2) {
    by_out<V, true, false, kSave>(k, s, begin, end);
  } else if (c.decoupled) {
    by_out<V, false, true, kSave>(k, s, begin, end);
  } else {
    by_out<V, false, false, kSave>(k, s, begin, end);
  }
}

// Elements [begin, end) of `s`: the decay, 16-bit copy and prev_* variants picked once, compiled
// out when unused.
template <class V>
void adam_tile(const AdamConstants& c, const AdamShard& s, int64_t begin, int64_t end) {
  const Consts<V> k(c);
  if (s.saves_prev()) {
    by_decay<V, true>(c, k, s, begin, end);
  } else {
    by_decay<V, false>(c, k, s, begin, end);
  }
}

}  // namespace
}  // namespace zero::kernels::cpu::detail
