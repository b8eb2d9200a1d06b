// `zero generate --device cuda` without a GPU: runtime::DeviceGenerator with the CUDA model and the
// CUDA backend on the CPU emulator (docs/emu.md) — a whole forward per token, weights copied once —
// gives the tokens of the CPU model through its key/value cache (runtime::generate), greedy and
// sampled with the same seed, on tiny presets with random initialisation (fixed seed). Built into
// cuda_engine_emu_test (the same emulated CUDA sources).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/device_generator.h"
#include "runtime/engine.h"
#include "runtime/generate.h"
#include "runtime/model_source.h"

namespace zero::runtime {
namespace {

class CudaGenerateOnEmulator : public ::testing::TestWithParam<const char*> {
 protected:
  // The CPU reference with fp32 GEMMs, as the CUDA model computes (see cuda_engine_emu_test.cc).
  void SetUp() override { ::setenv("ZERO_CPU_BF16_GEMM", "0", 1); }
};

TEST_P(CudaGenerateOnEmulator, TokensAreTheCpuModels) {
  auto source = ModelSource::open(std::string("preset:") + GetParam(), 42);
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  EngineOptions o;
  o.model_config = (*source)->config();
  o.check_memory = false;
  auto engine = Engine::create(o, (*source)->init_fn());
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();

  // Greedy, and sampled with a fixed seed (the whole distribution, not only its argmax: a random
  // GPT-2 mostly repeats its last token greedily).
  SamplingOptions greedy;
  greedy.max_new_tokens = 6;
  greedy.temperature = 0.0;
  SamplingOptions sampled = greedy;
  sampled.temperature = 1.0;
  sampled.seed = 5;
  const std::vector<int32_t> prompt = {3, 14, 15, 92};
  auto gpu = DeviceGenerator::create(Device::kCuda, o.model_config, (*engine)->params());
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  ASSERT_EQ((*gpu)->model().device(), Device::kCuda);
  for (const SamplingOptions& s : {greedy, sampled}) {
    std::vector<int32_t> want = prompt;
    generate((*engine)->model(), (*engine)->params(), want, s);
    ASSERT_EQ(want.size(), prompt.size() + 6);
    std::vector<int32_t> got = prompt;
    EXPECT_FALSE((*gpu)->generate(got, s));
    EXPECT_EQ(got, want) << "temperature " << s.temperature;
  }
  EXPECT_GT((*gpu)->device_bytes(), 0);
}

INSTANTIATE_TEST_SUITE_P(Presets, CudaGenerateOnEmulator,
                         ::testing::Values("gpt2-tiny", "llama-tiny"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace zero::runtime
