// CudaKvDecoder: KvDecoder (kv_decoder.h) on the GPU. Each append runs only the new tokens through
// a CudaTransformer's block forward (the code its training forward runs, cuda_block_forward.h),
// with attention over a per-layer key/value cache in device memory (kernels/attention/
// decode_attention_cuda.h), so a new token costs one token's forward instead of the window's.
// The logits equal the CPU KvDecoder's and the full forward's at the same positions up to fp32
// summation order (tested against both). With several slots (one cache, a sequence per slot), a
// batched append runs every entry's rows through one forward (N = the entries' rows packed, each
// at its own position: the RoPE rows gathered per row, GPT-2's position rows per entry) and each
// entry's attention over its own slot, so the weights are read once per step for the batch.
// Phi-3's longrope switches tables as KvDecoder's does (longrope_switch.h): per slot, the append
// that passes original_max_position_embeddings re-encoding the slot's cached positions.
// Legend: L layers, S slots, Hkv kv heads, D head dim, C hidden, V vocab, n new rows, N rows of
// all entries, E entries.
//
// Stream contract: everything runs on the model's stream, with its matmul context and the buffers
// it widens 16-bit units into (the model is idle while the decoder runs: one stream). The one host
// synchronisation per append is the logits' copy back (sampling reads them on the host).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/cached_decoder.h"
#include "model/cuda_transformer.h"
#include "model/longrope_switch.h"

namespace zero::model {

class CudaKvDecoder final : public CachedDecoder {
 public:
  // A cache of `capacity` positions for each of `slots` sequences for `model`, which must outlive
  // the decoder; allocates the cache (cache_bytes) now, the rows' scratch on the first append of
  // each larger N. Errors: capacity or slots < 1, capacity past GPT-2's max_position_embeddings or
  // past it with dynamic RoPE (as KvDecoder); out of device memory.
  // `cache_dtype`: fp32, or bf16 (half the cache's bytes, for 16-bit models: the new keys and
  // values rounded to nearest even as they are cached, widened as attention reads them).
  static StatusOr<std::unique_ptr<CudaKvDecoder>> create(CudaTransformer& model, int64_t capacity,
                                                         int64_t slots = 1,
                                                         DType cache_dtype = DType::kF32);
  ~CudaKvDecoder() override;
  CudaKvDecoder(const CudaKvDecoder&) = delete;
  CudaKvDecoder& operator=(const CudaKvDecoder&) = delete;

  // CachedDecoder's contract (logits copied to the host and waited for).
  int64_t slots() const override { return static_cast<int64_t>(lengths_.size()); }
  int64_t capacity() const override { return capacity_; }
  int64_t slot_length(int64_t slot) const override;
  void reset_slot(int64_t slot) override;
  void append_batch(ParamAccess& params, std::span<const SlotTokens> entries,
                    float* logits) override;

  // Device bytes of the key/value cache of `capacity` positions per slot: 2 * L * S * capacity *
  // Hkv * D elements of cache_dtype.
  static int64_t cache_bytes(const ModelConfig& config, int64_t capacity, int64_t slots = 1,
                             DType cache_dtype = DType::kF32);
  DType cache_dtype() const { return cache_dtype_; }
  // Device bytes this decoder holds: the cache, the RoPE tables and the largest append's scratch.
  int64_t device_bytes() const override { return static_cast<int64_t>(fixed_bytes_ + rows_bytes_); }

 private:
  class CacheAttention;
  class AcquiredUnit;
  CudaKvDecoder(CudaTransformer& model, int64_t capacity, int64_t slots, DType cache_dtype);
  // Checks the entries and packs their rows: host_tokens_, row_positions_, row_long_, entry_row_.
  // Returns N.
  int64_t pack_rows(std::span<const SlotTokens> entries);
  // The final norm and head of each entry's last row of x (N, C), its logits copied to row e of
  // `logits` (host), waited for.
  void head_of_last_rows(ParamAccess& params, std::span<const SlotTokens> entries, const float* x,
                         float* logits);
  // Sizes the rows' scratch for n rows (grows only).
  void ensure_rows(int64_t n);
  // rows (N, D/2) on the device = the host table's rows at each packed row's position, from
  // `long_table` for the rows that use longrope's long factors (the copy is complete when
  // append_batch returns: it synchronises).
  void upload_rope_rows(const std::vector<float>& table, const std::vector<float>& long_table,
                        std::vector<float>* staging, float* rows);
  // Slot `slot`'s key / value cache in the layer (capacity, Hkv, D) of cache_dtype_, and an
  // entry's rows in it from its slot's length on (where its new keys and values go).
  void* k_cache(int layer, int64_t slot) const;
  void* v_cache(int layer, int64_t slot) const;
  void* k_rows(int layer, const SlotTokens& e) const {
    return static_cast<char*>(k_cache(layer, e.slot)) + row_offset_bytes(e);
  }
  void* v_rows(int layer, const SlotTokens& e) const {
    return static_cast<char*>(v_cache(layer, e.slot)) + row_offset_bytes(e);
  }
  int64_t element_bytes() const { return static_cast<int64_t>(dtype_bytes(cache_dtype_)); }
  int64_t row_offset_bytes(const SlotTokens& e) const {
    return lengths_[static_cast<size_t>(e.slot)] * kv_ * element_bytes();
  }

  CudaTransformer& model_;
  int64_t capacity_ = 0;
  DType cache_dtype_ = DType::kF32;
  std::vector<int64_t> lengths_;  // per slot
  int64_t kv_ = 0;                // Hkv * D floats per cached position
  // The fixed slab: per layer K then V (S, capacity, Hkv, D), decode_attention's scratch, then
  // Llama's RoPE tables (capacity, D/2) each.
  char* fixed_ = nullptr;
  void* attention_scratch_ = nullptr;
  size_t fixed_bytes_ = 0;
  float *rope_cos_ = nullptr, *rope_sin_ = nullptr;  // longrope past its original context: short
  float *rope_cos_local_ = nullptr, *rope_sin_local_ = nullptr;  // Gemma 3's sliding layers
  LongropeSwitch longrope_;
  float *rope_cos_long_ = nullptr, *rope_sin_long_ = nullptr;  // and long (else null)
  // The same tables on the host, for gathering a batch's rows (empty with one slot).
  std::vector<float> host_cos_, host_sin_, host_cos_local_, host_sin_local_, host_cos_long_,
      host_sin_long_;
  // The rows' scratch for up to rows_ rows: the block's intermediates, the residual stream
  // ping-pong, the tokens, the prefill's logsumexp, the last row's final norm and logits.
  char* rows_slab_ = nullptr;
  size_t rows_bytes_ = 0;
  int64_t rows_ = 0;
  std::unique_ptr<CudaTransformer::BlockActs> acts_;
  float *x_a_ = nullptr, *x_b_ = nullptr;  // (n, C)
  int32_t* tokens_ = nullptr;
  void* x16_ =
      nullptr;  // a 16-bit model's GEMM operand copies (n, widest input padded to 8) // (n)
  float* lse_ = nullptr;  // (Hq, n) the flash prefill's logsumexp (unread)
  // Several slots or a bf16 cache: the new keys / values (n, Hkv*D) before they go to their slots.
  // Several slots: the packed rows' RoPE rows (n, D/2) each, and the entries' last rows (S, C).
  float *k_new_ = nullptr, *v_new_ = nullptr;
  float *rows_cos_ = nullptr, *rows_sin_ = nullptr, *rows_cos_local_ = nullptr,
        *rows_sin_local_ = nullptr;
  float* last_rows_ = nullptr;
  // Each entry's last row's final norm and logits: (S, C), (S), (S); (S, V rounded up to 8).
  float *final_norm_ = nullptr, *final_mean_ = nullptr, *final_rstd_ = nullptr;
  float* logits_ = nullptr;
  // Staging of the tokens' and RoPE rows' copies (read before append returns), each packed row's
  // position, each entry's first row (E + 1: the last is N).
  std::vector<int32_t> host_tokens_;
  std::vector<float> host_rows_cos_, host_rows_sin_, host_rows_cos_local_, host_rows_sin_local_;
  std::vector<int64_t> row_positions_, entry_row_;
  std::vector<bool> row_long_;  // each packed row: longrope's long table
};

}  // namespace zero::model
