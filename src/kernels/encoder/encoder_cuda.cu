// CUDA token (+ learned position) embedding. Legend: B batch, T time, C channels, V vocab,
// N = B*T positions. Forward: one block per position row. Backward, deterministic and without
// atomics: positions are sorted by token id with CUB's stable radix sort, so each id's positions
// form one run in (b, t) order; the warp that sits at the start of a run sums the run's rows of
// dout for its slice of channels, in order, and adds that sum to dwte once. dwpe: one thread per
// (t, channel pack) sums over b in order.

#include "kernels/encoder/encoder_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

#include <cub/device/device_radix_sort.cuh>

#include "core/check.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/launch.h"
#include "kernels/cuda_vector.cuh"

namespace zero::kernels::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kForwardMaxThreads = 256;
constexpr int kRunWarps = 4;  // sorted positions (one per warp) per block of the dwte kernel
constexpr int kThreads = 256;
constexpr int64_t kMaxGridStrideBlocks = int64_t{1} << 16;

// ---- forward ----

// Row bt of out. REQUIRES (kPack > 1): C % kPack == 0 and out, wte, wpe aligned to kPack elements.
template <typename T, int kPack>
__global__ void encoder_forward_kernel(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                       int64_t T_, int64_t C, int64_t V) {
  const int64_t bt = blockIdx.x;
  const int32_t token = tokens[bt];
  const bool valid = token >= 0 && token < V;
  const T* wte_C = wte + (valid ? token : 0) * C;
  const T* wpe_C = wpe != nullptr ? wpe + (bt % T_) * C : nullptr;
  T* out_C = out + bt * C;
  for (int64_t c = threadIdx.x * int64_t{kPack}; c < C; c += blockDim.x * int64_t{kPack}) {
    float y[kPack];
    if (valid) {
      load_f32<kPack>(wte_C + c, y);
      if (wpe_C != nullptr) {
        float p[kPack];
        load_f32<kPack>(wpe_C + c, p);
#pragma unroll
        for (int k = 0; k < kPack; ++k) y[k] += p[k];
      }
    } else {
#pragma unroll
      for (int k = 0; k < kPack; ++k) y[k] = NAN;
    }
    store_f32<kPack>(out_C + c, y);
  }
}

// ---- backward ----

// Sort keys: the token id, or V for an id outside [0, V) (its run is skipped); values: positions.
__global__ void encoder_sort_input_kernel(uint32_t* keys, int32_t* positions, const int32_t* tokens,
                                          int64_t N, int64_t V) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N;
       i += stride) {
    const int32_t token = tokens[i];
    keys[i] = token >= 0 && token < V ? static_cast<uint32_t>(token) : static_cast<uint32_t>(V);
    positions[i] = static_cast<int32_t>(i);
  }
}

// Warp w of block b looks at sorted index i = b * kRunWarps + w; only a warp at the start of a run
// of equal keys works: it walks the run 32 entries at a time (a ballot finds how far the run goes;
// keys are sorted, so the run's entries are a prefix of the 32), adds dout's rows for channels
// [c, c + kPack) of this lane, c = (blockIdx.y * 32 + lane) * kPack, in sorted (= (b, t)) order,
// then adds the sum to dwte[key]. Only one warp touches a given (key, channel): no atomics.
// REQUIRES (kPack > 1): C % kPack == 0 and dout aligned to kPack elements.
template <typename T, int kPack>
__global__ void __launch_bounds__(kRunWarps * 32)
    encoder_wte_backward_kernel(float* dwte, const T* dout, const uint32_t* sorted_keys,
                                const int32_t* sorted_positions, int64_t N, int64_t C, uint32_t V) {
  const int lane = threadIdx.x % 32;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRunWarps + threadIdx.x / 32;
  if (i >= N) return;  // warp-uniform, as are the two tests below: the ballots see full warps
  const uint32_t key = sorted_keys[i];
  if (key >= V) return;                            // out-of-range ids (sorted last)
  if (i > 0 && sorted_keys[i - 1] == key) return;  // not the start of a run
  const int64_t c = (static_cast<int64_t>(blockIdx.y) * 32 + lane) * kPack;
  const bool active = c < C;  // inactive lanes still take part in the ballots and shuffles
  // Inactive lanes read a valid element (c = 0) and drop their sum: the loop has no branch around
  // its loads, so the unrolled loads can all be in flight together.
  const int64_t c_load = active ? c : 0;
  float acc[kPack] = {};
  for (int64_t j0 = i;; j0 += 32) {
    const int64_t j = j0 + lane;
    const bool in_run = j < N && sorted_keys[j] == key;
    const int32_t position = in_run ? sorted_positions[j] : 0;
    const int run_count = __popc(__ballot_sync(kFullMask, in_run));  // lanes [0, run_count)
    // Unrolled so several rows' loads are in flight at once; the additions stay in k order.
#pragma unroll 8
    for (int k = 0; k < run_count; ++k) {
      const int64_t bt = __shfl_sync(kFullMask, position, k);
      float d[kPack];
      load_f32<kPack>(dout + bt * C + c_load, d);
#pragma unroll
      for (int q = 0; q < kPack; ++q) acc[q] += d[q];
    }
    if (run_count < 32) break;
  }
  if (active) {
    float* dwte_row = dwte + static_cast<int64_t>(key) * C + c;
#pragma unroll
    for (int q = 0; q < kPack; ++q) dwte_row[q] += acc[q];
  }
}

// dwpe[t, c..c+kPack) += Σ_b dout[b, t, c..c+kPack), b in order; one thread per pack of (T, C).
// REQUIRES (kPack > 1): C % kPack == 0 and dout aligned to kPack elements.
template <typename T, int kPack>
__global__ void encoder_wpe_backward_kernel(float* dwpe, const T* dout, int64_t B, int64_t T_,
                                            int64_t C) {
  const int64_t num_packs = T_ * C / kPack;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < num_packs;
       p += stride) {
    const int64_t tc = p * kPack;  // flat index into (T, C); a pack never crosses a row
    float acc[kPack] = {};
#pragma unroll 4
    for (int64_t b = 0; b < B; ++b) {
      float d[kPack];
      load_f32<kPack>(dout + b * T_ * C + tc, d);
#pragma unroll
      for (int q = 0; q < kPack; ++q) acc[q] += d[q];
    }
#pragma unroll
    for (int q = 0; q < kPack; ++q) dwpe[tc + q] += acc[q];
  }
}

// The backward's scratch, carved from one block: sort keys and positions in and out, then CUB's
// temporary storage, each at a 256-byte offset.
struct SortScratch {
  size_t keys_in_offset, keys_out_offset, positions_in_offset, positions_out_offset;
  size_t sort_temp_offset, sort_temp_bytes, total_bytes;
};

constexpr size_t kScratchAlign = 256;
size_t align_up(size_t bytes) {
  return (bytes + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
}

// Keys lie in [0, V] (V marks out-of-range ids): only their low bit_width(V) bits need sorting.
int sort_end_bit(int64_t V) { return std::bit_width(static_cast<uint32_t>(V)); }

SortScratch sort_scratch(int64_t N, int64_t V) {
  size_t temp_bytes = 0;
  CUDA_ABORT_IF_ERROR(cub::DeviceRadixSort::SortPairs(
      nullptr, temp_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), static_cast<int>(N), 0,
      sort_end_bit(V)));
  const size_t array_bytes = align_up(static_cast<size_t>(N) * sizeof(uint32_t));
  SortScratch s;
  s.keys_in_offset = 0;
  s.keys_out_offset = array_bytes;
  s.positions_in_offset = 2 * array_bytes;
  s.positions_out_offset = 3 * array_bytes;
  s.sort_temp_offset = 4 * array_bytes;
  s.sort_temp_bytes = temp_bytes;
  s.total_bytes = s.sort_temp_offset + align_up(temp_bytes);
  return s;
}

void check_shape(int64_t B, int64_t T_, int64_t C, int64_t V) {
  ZERO_CHECK(B >= 0 && T_ >= 0 && C >= 0, "encoder: bad shape B ", B, " T ", T_, " C ", C);
  ZERO_CHECK(V >= 1 && V < std::numeric_limits<int32_t>::max(), "encoder: bad vocabulary ", V);
  ZERO_CHECK(B * T_ <= std::numeric_limits<int32_t>::max(), "encoder: too many positions ", B * T_);
  ZERO_CHECK(C <= int64_t{65535} * 32, "encoder: too many channels ", C);  // the dwte grid's y
}

unsigned grid_stride_blocks(int64_t work_items) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((work_items + kThreads - 1) / kThreads, 1, kMaxGridStrideBlocks));
}

template <typename T, int kPack>
void launch_wte_backward(float* dwte, const T* dout, const uint32_t* sorted_keys,
                         const int32_t* sorted_positions, int64_t N, int64_t C, int64_t V,
                         cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((N + kRunWarps - 1) / kRunWarps),
                  static_cast<unsigned>((C + 32 * kPack - 1) / (32 * kPack)));
  ZERO_LAUNCH(grid, kRunWarps * 32, 0, stream, encoder_wte_backward_kernel<T, kPack>)
  (dwte, dout, sorted_keys, sorted_positions, N, C, static_cast<uint32_t>(V));
  CUDA_CHECK_LAUNCH();
}

template <typename T, int kPack>
void launch_wpe_backward(float* dwpe, const T* dout, int64_t B, int64_t T_, int64_t C,
                         cudaStream_t stream) {
  ZERO_LAUNCH(grid_stride_blocks(T_ * C / kPack), kThreads, 0, stream,
              encoder_wpe_backward_kernel<T, kPack>)
  (dwpe, dout, B, T_, C);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

template <typename T>
void encoder_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                     int64_t T_, int64_t C, int64_t V, cudaStream_t stream) {
  check_shape(B, T_, C, V);
  const int64_t N = B * T_;
  if (N == 0 || C == 0) return;
  constexpr int kPack = kVec16<T>;
  const bool vector = C % kPack == 0 && all_pack_aligned<kPack>(out, wte, wpe);
  const int64_t packs_per_row = vector ? C / kPack : C;
  const int threads =
      static_cast<int>(std::min<int64_t>(kForwardMaxThreads, (packs_per_row + 31) / 32 * 32));
  if (vector) {
    ZERO_LAUNCH(static_cast<unsigned>(N), threads, 0, stream, encoder_forward_kernel<T, kPack>)
    (out, tokens, wte, wpe, T_, C, V);
  } else {
    ZERO_LAUNCH(static_cast<unsigned>(N), threads, 0, stream, encoder_forward_kernel<T, 1>)
    (out, tokens, wte, wpe, T_, C, V);
  }
  CUDA_CHECK_LAUNCH();
}

size_t encoder_backward_scratch_bytes(int64_t B, int64_t T_, int64_t V) {
  check_shape(B, T_, 0, V);
  if (B * T_ == 0) return 0;
  return sort_scratch(B * T_, V).total_bytes;
}

template <typename T>
void encoder_backward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens, int64_t B,
                      int64_t T_, int64_t C, int64_t V, void* scratch, size_t scratch_bytes,
                      cudaStream_t stream) {
  check_shape(B, T_, C, V);
  const int64_t N = B * T_;
  if (N == 0 || C == 0) return;
  const SortScratch s = sort_scratch(N, V);
  ZERO_CHECK(scratch_bytes >= s.total_bytes, "encoder: scratch of ", scratch_bytes, " bytes < ",
             s.total_bytes);
  ZERO_CHECK(reinterpret_cast<uintptr_t>(scratch) % kScratchAlign == 0,
             "encoder: scratch not 256-byte aligned");
  char* base = static_cast<char*>(scratch);
  auto* keys_in = reinterpret_cast<uint32_t*>(base + s.keys_in_offset);             // (N)
  auto* keys_out = reinterpret_cast<uint32_t*>(base + s.keys_out_offset);           // (N)
  auto* positions_in = reinterpret_cast<int32_t*>(base + s.positions_in_offset);    // (N)
  auto* positions_out = reinterpret_cast<int32_t*>(base + s.positions_out_offset);  // (N)
  void* sort_temp = base + s.sort_temp_offset;

  ZERO_LAUNCH(grid_stride_blocks(N), kThreads, 0, stream, encoder_sort_input_kernel)
  (keys_in, positions_in, tokens, N, V);
  CUDA_CHECK_LAUNCH();
  size_t sort_temp_bytes = s.sort_temp_bytes;
  CUDA_ABORT_IF_ERROR(cub::DeviceRadixSort::SortPairs(
      sort_temp, sort_temp_bytes, keys_in, keys_out, positions_in, positions_out,
      static_cast<int>(N), 0, sort_end_bit(V), stream));
  constexpr int kPack = kVec16<T>;
  const bool vector = C % kPack == 0 && all_pack_aligned<kPack>(dout);
  if (vector) {
    launch_wte_backward<T, kPack>(dwte, dout, keys_out, positions_out, N, C, V, stream);
  } else {
    launch_wte_backward<T, 1>(dwte, dout, keys_out, positions_out, N, C, V, stream);
  }
  if (dwpe != nullptr) {
    if (vector) {
      launch_wpe_backward<T, kPack>(dwpe, dout, B, T_, C, stream);
    } else {
      launch_wpe_backward<T, 1>(dwpe, dout, B, T_, C, stream);
    }
  }
}

#define ZERO_INSTANTIATE_ENCODER_CUDA(T)                                                        \
  template void encoder_forward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t,    \
                                   int64_t, int64_t, cudaStream_t);                             \
  template void encoder_backward<T>(float*, float*, const T*, const int32_t*, int64_t, int64_t, \
                                    int64_t, int64_t, void*, size_t, cudaStream_t);
ZERO_INSTANTIATE_ENCODER_CUDA(float)
ZERO_INSTANTIATE_ENCODER_CUDA(__nv_bfloat16)
ZERO_INSTANTIATE_ENCODER_CUDA(__half)
#undef ZERO_INSTANTIATE_ENCODER_CUDA

}  // namespace zero::kernels::cuda
