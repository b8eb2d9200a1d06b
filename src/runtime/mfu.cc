// FLOPs per token and the GPU peak table (mfu.h).
#include "runtime/mfu.h"

#include <array>

namespace zero::runtime {

double train_flops_per_token(const model::ModelConfig& config, int64_t seq_len) {
  const double params = static_cast<double>(model::count_params(config).total);
  return 6.0 * params + 12.0 * static_cast<double>(config.num_layers) *
                            static_cast<double>(config.hidden_size) * static_cast<double>(seq_len);
}

namespace {

struct GpuPeak {
  std::string_view name_part;  // matched as a substring of the device name; first match wins
  double bf16_flops;           // dense tensor-core bf16 / fp16
  double fp32_flops;           // CUDA-core fp32 (no TF32)
};

// The vendors' data-sheet figures. Order matters: the more specific names first.
constexpr std::array<GpuPeak, 5> kGpuPeaks = {{
    {"H100 PCIe", 756e12, 51e12},
    {"H100 NVL", 835e12, 60e12},
    {"H100", 989e12, 67e12},  // SXM ("NVIDIA H100 80GB HBM3")
    {"H200", 989e12, 67e12},  // H200 SXM and GH200: the H100 SXM's compute
    {"A100", 312e12, 19.5e12},
}};

}  // namespace

std::optional<double> peak_dense_flops(std::string_view device_name, DType dtype) {
  for (const GpuPeak& gpu : kGpuPeaks) {
    if (device_name.find(gpu.name_part) == std::string_view::npos) continue;
    switch (dtype) {
      case DType::kBF16:
      case DType::kF16: return gpu.bf16_flops;
      case DType::kF32: return gpu.fp32_flops;
    }
  }
  return std::nullopt;
}

}  // namespace zero::runtime
