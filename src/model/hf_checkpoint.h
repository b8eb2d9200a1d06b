// Hugging Face model checkpoints: config.json + model.safetensors, or the sharded form
// (model-0000k-of-0000n.safetensors + model.safetensors.index.json), read into and written from the
// unit layout. GPT-2 keys are accepted with or without the "transformer." prefix; its Conv1D [in,
// out] weights are transposed to our (out, in) layout; attention mask buffers (attn.bias,
// attn.masked_bias) are ignored; a tied head is read from and written as the embedding only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/safetensors.h"
#include "core/status.h"
#include "core/storage.h"
#include "model/param_layout.h"

namespace zero::model {

// Reads parameters of one HF checkpoint directory, unit by unit (memory: one parameter at a time).
class HfWeightReader {
 public:
  // Opens DIR's safetensors file(s) and checks every parameter of `layout` is present with the
  // right shape, and that no unexpected tensor is there. Errors name the file and the tensor.
  static StatusOr<std::unique_ptr<HfWeightReader>> open(Storage& storage, const std::string& dir,
                                                        const ModelLayout& layout);

  // Writes unit u's flat elements [begin, end) into dst[0 .. end-begin); padding past the unit's
  // numel is zero-filled. Reads only the parameters overlapping the range.
  Status read_unit_range(int u, int64_t begin, int64_t end, float* dst) const;
  // The dtype every parameter is stored in when they share one of fp32 / bf16 / fp16 (what a model
  // loaded for inference keeps, bit for bit); fp32 when they differ or another dtype is stored.
  DType stored_dtype() const;

 private:
  struct Source {
    const SafetensorsReader* reader = nullptr;
    std::string tensor_name;  // name inside the file
    int64_t elem_offset = 0;  // where the parameter starts in it (a part of a fused matrix)
  };
  HfWeightReader(const ModelLayout& layout) : layout_(layout) {}
  Status read_param(const ParamSpec& p, std::vector<float>& out) const;

  const ModelLayout& layout_;
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, Source> sources_;  // our HF name -> where it lives
};

struct HfSaveOptions {
  DType dtype = DType::kF32;              // storage dtype of the weights
  uint64_t max_shard_bytes = 5ull << 30;  // "5GB" as HF counts it (GiB-sized shards)
};

// Writes config.json + weights for `layout` into `dir` (created if missing). unit_values(u) returns
// unit u's full fp32 values (called in any order, possibly more than once). Each file is written to
// a temporary name, fsynced and renamed, so a crash never leaves a truncated file under its real
// name.
Status save_hf_model(Storage& storage, const std::string& dir, const ModelLayout& layout,
                     const std::function<const float*(int u)>& unit_values,
                     const HfSaveOptions& options);

// Parses "5GB", "500MB", "2GiB", "1000000" (bytes) as HF's max_shard_size does (GB = 10^9? HF uses
// 10^9 for "GB" and 2^30 for "GiB").
StatusOr<uint64_t> parse_size_bytes(const std::string& text);

}  // namespace zero::model
