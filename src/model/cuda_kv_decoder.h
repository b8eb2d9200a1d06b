// CudaKvDecoder: KvDecoder (kv_decoder.h) on the GPU. Each append runs only the new tokens through
// a CudaTransformer's block forward (the code its training forward runs, cuda_block_forward.h),
// with attention over a per-layer key/value cache in device memory (kernels/attention/
// decode_attention_cuda.h), so a new token costs one token's forward instead of the window's.
// The logits equal the CPU KvDecoder's and the full forward's at the same positions up to fp32
// summation order (tested against both). Legend: L layers, Hkv kv heads, D head dim, C hidden,
// V vocab, n new rows.
//
// Stream contract: everything runs on the model's stream, with its matmul context and the buffers
// it widens 16-bit units into (the model is idle while the decoder runs: one stream). The one host
// synchronisation per append is the logits' copy back (sampling reads them on the host).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "model/cached_decoder.h"
#include "model/cuda_transformer.h"

namespace zero::model {

class CudaKvDecoder final : public CachedDecoder {
 public:
  // A cache of `capacity` positions for `model`, which must outlive the decoder; allocates the
  // cache (cache_bytes) now, the rows' scratch on the first append of each larger n.
  // Errors: capacity < 1, past GPT-2's max_position_embeddings or past it with dynamic RoPE (as
  // KvDecoder); out of device memory.
  static StatusOr<std::unique_ptr<CudaKvDecoder>> create(CudaTransformer& model, int64_t capacity);
  ~CudaKvDecoder() override;
  CudaKvDecoder(const CudaKvDecoder&) = delete;
  CudaKvDecoder& operator=(const CudaKvDecoder&) = delete;

  // CachedDecoder's contract (logits copied to the host and waited for).
  int64_t length() const override { return length_; }
  int64_t capacity() const override { return capacity_; }
  void reset() override { length_ = 0; }
  void append(ParamAccess& params, const int32_t* tokens, int64_t n, float* logits) override;

  // Device bytes of the key/value cache of `capacity` positions: 2 * L * capacity * Hkv * D fp32.
  static int64_t cache_bytes(const ModelConfig& config, int64_t capacity);
  // Device bytes this decoder holds: the cache, the RoPE tables and the largest append's scratch.
  int64_t device_bytes() const override { return static_cast<int64_t>(fixed_bytes_ + rows_bytes_); }

 private:
  class CacheAttention;
  class AcquiredUnit;
  CudaKvDecoder(CudaTransformer& model, int64_t capacity);
  // Sizes the rows' scratch for n rows (grows only).
  void ensure_rows(int64_t n);
  // The layer's key / value cache (capacity, Hkv, D), and its rows from position length_ on (where
  // an append's new keys and values go).
  float* k_cache(int layer) const;
  float* v_cache(int layer) const;
  float* k_rows(int layer) const { return k_cache(layer) + length_ * kv_; }
  float* v_rows(int layer) const { return v_cache(layer) + length_ * kv_; }

  CudaTransformer& model_;
  int64_t capacity_ = 0;
  int64_t length_ = 0;
  int64_t kv_ = 0;  // Hkv * D floats per cached position
  // The fixed slab: per layer K then V (capacity, Hkv, D), decode_attention's scratch, then
  // Llama's RoPE tables (capacity, D/2) each.
  char* fixed_ = nullptr;
  void* attention_scratch_ = nullptr;
  size_t fixed_bytes_ = 0;
  float *rope_cos_ = nullptr, *rope_sin_ = nullptr;
  float *rope_cos_local_ = nullptr, *rope_sin_local_ = nullptr;  // Gemma 3's sliding layers
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
  float *final_norm_ = nullptr, *final_mean_ = nullptr, *final_rstd_ = nullptr;  // (C), (1), (1)
  float* logits_ = nullptr;                                                      // (V)
  std::vector<int32_t> host_tokens_;  // staging of the tokens' copy (read before append returns)
};

}  // namespace zero::model
