// Model FLOPs utilization: the training FLOPs a token costs, and the dense peak of known GPUs.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.h"
#include "model/model_config.h"

namespace zero::runtime {

// Forward + backward FLOPs per trained token at sequence length `seq_len`: 6N for the matmuls
// (N = every parameter, tied embeddings once: the LM head's matmul is real work) plus PaLM's
// 12·L·C·T for attention's QK^T and AV. The same count as bench/gpu/torch_step.py, so MFU agrees
// with the PyTorch baselines. Recomputation (gradient checkpointing) is not counted: this is
// model FLOPs, not hardware FLOPs.
double train_flops_per_token(const model::ModelConfig& config, int64_t seq_len);

// Dense (no sparsity) peak FLOP/s of one GPU named `device_name` (cudaGetDeviceProperties' name,
// e.g. "NVIDIA H100 80GB HBM3") for GEMMs in `dtype` (bf16 / fp16 on tensor cores; fp32 on the
// CUDA cores, without TF32). std::nullopt for a GPU not in the table.
std::optional<double> peak_dense_flops(std::string_view device_name, DType dtype);

}  // namespace zero::runtime
