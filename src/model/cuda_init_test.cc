// The random initialisation on the GPU (model/cuda_init.h) against the host's (model/init.h): every
// unit of small presets, bit for bit, whole and in shards that start and end inside parameters,
// through device buffers smaller than a parameter (several chunks). Runs on a GPU, and on the CPU
// emulator as cuda_init_emu_test (docs/emu.md).
#include "model/cuda_init.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda_test_util.h"
#include "model/init.h"
#include "model/model_config.h"

namespace zero::model {
namespace {

// The first element where a and b differ in their bits, or -1.
int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  }
  return -1;
}

class CudaInit : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaInit, EveryUnitIsBitwiseTheHostInit) {
  ZERO_SKIP_WITHOUT_GPU();
  auto config = preset_model_config(GetParam());
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  const ModelLayout layout(*config);
  for (int u = 0; u < layout.num_units(); ++u) {
    // The unit padded by 5 elements (zeros past numel), through 4099-element device chunks.
    const int64_t end = layout.unit(u).numel + 5;
    std::vector<float> host(static_cast<size_t>(end)), gpu(static_cast<size_t>(end), -1.0f);
    init_unit_range(layout, u, 42, 0, end, host.data());
    ASSERT_TRUE(init_unit_range_cuda(layout, u, 42, 0, end, gpu.data(), 4099).ok());
    EXPECT_EQ(first_difference(gpu, host), -1) << layout.unit(u).name;
  }
}

TEST_P(CudaInit, ShardsAreBitwiseTheHostShards) {
  ZERO_SKIP_WITHOUT_GPU();
  auto config = preset_model_config(GetParam());
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  const ModelLayout layout(*config);
  const int u = 1;  // a block: norms, projections, biases (GPT-2) one after another
  const int64_t numel = layout.unit(u).numel;
  for (int world : {2, 3}) {
    const int64_t shard = (numel + world - 1) / world;
    for (int r = 0; r < world; ++r) {
      const int64_t begin = r * shard, end = begin + shard;
      std::vector<float> host(static_cast<size_t>(shard)), gpu(static_cast<size_t>(shard));
      init_unit_range(layout, u, 7, begin, end, host.data());
      ASSERT_TRUE(init_unit_range_cuda(layout, u, 7, begin, end, gpu.data(), 1000).ok());
      EXPECT_EQ(first_difference(gpu, host), -1) << "world " << world << " rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, CudaInit,
                         ::testing::Values("gpt2-tiny", "llama-tiny", "gemma3-tiny", "qwen3-tiny"));

}  // namespace
}  // namespace zero::model
