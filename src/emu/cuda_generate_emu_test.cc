// `zero generate --device cuda` without a GPU: runtime::DeviceGenerator with the CUDA model and the
// CUDA backend on the CPU emulator (docs/emu.md) — through the GPU's key/value cache
// (model::CudaKvDecoder) and through a whole forward per token (--no_kv_cache), weights copied
// once — gives the tokens of the CPU model through its key/value cache (runtime::generate), greedy
// and sampled with the same seed, also when the context fills up (the oldest half dropped, the
// newest re-read), on tiny presets with random initialisation (fixed seed). Built into
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
  // A context of 7 positions for a prompt of 4 and 9 new tokens: the window fills after 3, then
  // its newest 3 are re-read (prefilled) and it fills again.
  SamplingOptions filling = sampled;
  filling.context_limit = 7;
  filling.max_new_tokens = 9;
  const std::vector<int32_t> prompt = {3, 14, 15, 92};
  auto gpu = DeviceGenerator::create(Device::kCuda, o.model_config, (*engine)->params());
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  ASSERT_EQ((*gpu)->model().device(), Device::kCuda);
  using Decoding = DeviceGenerator::Decoding;
  for (const SamplingOptions& s : {greedy, sampled, filling}) {
    std::vector<int32_t> want = prompt;
    generate((*engine)->model(), (*engine)->params(), want, s);
    ASSERT_EQ(want.size(), prompt.size() + static_cast<size_t>(s.max_new_tokens));
    for (Decoding decoding : {Decoding::kCached, Decoding::kRecompute}) {
      std::vector<int32_t> got = prompt;
      auto stopped = (*gpu)->generate(got, s, decoding);
      ASSERT_TRUE(stopped.ok()) << stopped.status().to_string();
      EXPECT_FALSE(*stopped);
      EXPECT_EQ(got, want) << "temperature " << s.temperature << ", context limit "
                           << s.context_limit << ", "
                           << (decoding == Decoding::kCached ? "cached" : "recomputed");
    }
  }
  EXPECT_GT((*gpu)->device_bytes(), 0);
}

// Counts what a batch reports (the tokens are in the sequences).
class CountingObserver final : public BatchObserver {
 public:
  bool on_token(int64_t, int32_t) override { return false; }
  Status on_finish(int64_t, FinishReason) override {
    ++finished;
    return ok_status();
  }
  int finished = 0;
};

// Batched (`zero generate --prompts_file --device cuda`): four ragged prompts through three slots
// of the GPU's cache (a finished sequence's slot taken by the fourth) give the CPU model's batch
// tokens, greedy, and sampled while the context fills (windows re-read inside the batch).
TEST_P(CudaGenerateOnEmulator, BatchedTokensAreTheCpuModels) {
  auto source = ModelSource::open(std::string("preset:") + GetParam(), 42);
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  EngineOptions o;
  o.model_config = (*source)->config();
  o.check_memory = false;
  auto engine = Engine::create(o, (*source)->init_fn());
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto gpu = DeviceGenerator::create(Device::kCuda, o.model_config, (*engine)->params());
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  SamplingOptions greedy;
  greedy.temperature = 0.0;
  // Sampled with a repetition penalty, in a context of 7 positions that fills.
  SamplingOptions filling;
  filling.temperature = 1.0;
  filling.repetition_penalty = 1.3;
  filling.seed = 5;
  filling.context_limit = 7;
  for (const SamplingOptions& options : {greedy, filling}) {
    auto batch = [&] {
      std::vector<BatchSequence> seqs(4);
      const std::vector<std::vector<int32_t>> prompts = {{3, 14, 15, 92}, {6}, {5, 3, 5}, {8, 9}};
      for (size_t i = 0; i < seqs.size(); ++i) {
        seqs[i].tokens = prompts[i];
        seqs[i].options = options;
        seqs[i].options.max_new_tokens = 3 + 2 * static_cast<int64_t>(i);
        seqs[i].options.seed = sequence_seed(options.seed, static_cast<int64_t>(i));
      }
      return seqs;
    };
    std::vector<BatchSequence> want = batch(), got = batch();
    CountingObserver cpu_done, gpu_done;
    ASSERT_TRUE(generate_batch((*engine)->model(), (*engine)->params(), want, 3, cpu_done).ok());
    const Status status = (*gpu)->generate_batch(got, 3, gpu_done);
    ASSERT_TRUE(status.ok()) << status.to_string();
    EXPECT_EQ(gpu_done.finished, 4);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens)
          << "sequence " << i << ", temperature " << options.temperature << ", context limit "
          << options.context_limit;
    }
  }
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
