// FLOPs per token against a hand count of GPT-2 small (HF's 124,439,808 parameters), and the peak
// table's lookups.
#include "runtime/mfu.h"

#include <gtest/gtest.h>

namespace zero::runtime {
namespace {

TEST(Mfu, Gpt2SmallFlopsPerTokenByHand) {
  auto mc = model::preset_model_config("gpt2-124m");
  ASSERT_TRUE(mc.ok());
  // 6 x 124,439,808 (wte 50257x768 + wpe 1024x768 + 12 x (12·768² + 13·768) + 2·768) plus
  // 12 x 12 layers x 768 x 1024.
  const double want = 6.0 * 124439808.0 + 12.0 * 12 * 768 * 1024;
  EXPECT_EQ(train_flops_per_token(*mc, 1024), want);
  EXPECT_EQ(train_flops_per_token(*mc, 1), 6.0 * 124439808.0 + 12.0 * 12 * 768);
}

TEST(Mfu, PeakTableByDeviceNameAndDtype) {
  EXPECT_EQ(peak_dense_flops("NVIDIA H100 80GB HBM3", DType::kBF16), 989e12);
  EXPECT_EQ(peak_dense_flops("NVIDIA H100 80GB HBM3", DType::kF16), 989e12);
  EXPECT_EQ(peak_dense_flops("NVIDIA H100 80GB HBM3", DType::kF32), 67e12);
  EXPECT_EQ(peak_dense_flops("NVIDIA H100 PCIe", DType::kBF16), 756e12);
  EXPECT_EQ(peak_dense_flops("NVIDIA H200", DType::kBF16), 989e12);
  EXPECT_EQ(peak_dense_flops("NVIDIA A100-SXM4-80GB", DType::kBF16), 312e12);
  EXPECT_EQ(peak_dense_flops("NVIDIA A100 80GB PCIe", DType::kF32), 19.5e12);
  EXPECT_EQ(peak_dense_flops("NVIDIA GeForce RTX 4090", DType::kBF16), std::nullopt);
  EXPECT_EQ(peak_dense_flops("", DType::kBF16), std::nullopt);
}

}  // namespace
}  // namespace zero::runtime
