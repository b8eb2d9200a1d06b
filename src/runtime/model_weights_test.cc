// ModelWeights: inference's one copy of the weights. Each unit holds what the source's init gives
// (bitwise, or rounded once to a 16-bit dtype); a transformers-saved bf16 model loaded in bf16
// decodes the tokens of the same model loaded in fp32; and `zero eval`'s engine-free evaluation
// equals the training Engine's eval_loss bitwise.
#include "runtime/model_weights.h"

#include <cstring>

#include <gtest/gtest.h>

#include "comm/self_communicator.h"
#include "core/dtype.h"
#include "core/storage.h"
#include "kernels/elementwise/elementwise.h"
#include "model/init.h"
#include "model/model_config.h"
#include "model/transformer.h"
#include "runtime/engine.h"
#include "runtime/evaluation.h"
#include "runtime/generate.h"
#include "runtime/model_source.h"

namespace zero::runtime {
namespace {

const std::string kFixtures = std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/";

std::unique_ptr<ModelSource> open_source(const std::string& spec) {
  auto s = ModelSource::open(spec, 7);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return std::move(*s);
}

TEST(ModelWeights, HoldsEachUnitAsInitFillsIt) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::unique_ptr<ModelSource> src = open_source("preset:gpt2-tiny");
    const model::ModelLayout layout(src->config());
    auto w = ModelWeights::load(layout, dtype, src->init_fn());
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    int64_t want_bytes = 0;
    for (int u = 0; u < layout.num_units(); ++u) {
      const int64_t n = layout.unit(u).numel;
      std::vector<float> f32(static_cast<size_t>(n));
      ASSERT_TRUE(src->init_fn()(u, 0, n, f32.data()).ok());
      std::vector<char> want(static_cast<size_t>(n) * dtype_bytes(dtype));
      if (dtype == DType::kF32) {
        std::memcpy(want.data(), f32.data(), want.size());
      } else {
        kernels::cpu::cast_from_f32(f32.data(), want.data(), dtype, n);
      }
      const model::ParamView v = (*w)->acquire(u);
      EXPECT_EQ(v.dtype, dtype);
      EXPECT_EQ(v.numel, n);
      EXPECT_EQ(std::memcmp(v.data, want.data(), want.size()), 0) << "unit " << u;
      (*w)->release(u);
      want_bytes += static_cast<int64_t>(want.size());
    }
    EXPECT_EQ((*w)->bytes(), want_bytes);
  }
}

TEST(ModelWeights, AnInitErrorNamesTheUnit) {
  std::unique_ptr<ModelSource> src = open_source("preset:gpt2-tiny");
  const model::ModelLayout layout(src->config());
  auto w = ModelWeights::load(layout, DType::kBF16, [](int u, int64_t, int64_t, float*) {
    return u == 1 ? data_loss("truncated file") : ok_status();
  });
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().to_string().find(layout.unit(1).name), std::string::npos)
      << w.status().to_string();
  EXPECT_NE(w.status().to_string().find("truncated file"), std::string::npos);
}

// A bf16 checkpoint saved by transformers: stored_dtype says bf16, and greedy decoding over its
// bf16 weights gives the tokens of the fp32 copy (the model widens each unit exactly).
TEST(ModelWeights, Bf16CheckpointDecodesAsItsFp32Copy) {
  for (const char* name :
       {"llama_default_untied_bf16_sharded_hf4", "gpt2_untied_bf16_sharded_hf5"}) {
    std::unique_ptr<ModelSource> src = open_source(kFixtures + "hf_matrix/" + name);
    EXPECT_EQ(src->stored_dtype(), DType::kBF16) << name;
    const model::ModelLayout layout(src->config());
    auto bf16 = ModelWeights::load(layout, DType::kBF16, src->init_fn());
    auto f32 = ModelWeights::load(layout, DType::kF32, src->init_fn());
    ASSERT_TRUE(bf16.ok() && f32.ok());
    EXPECT_EQ((*bf16)->bytes() * 2, (*f32)->bytes());
    model::Transformer model(src->config());
    SamplingOptions o;
    o.max_new_tokens = 10;
    o.temperature = 0.0;
    std::vector<int32_t> a = {1, 2, 3}, b = a;
    generate(model, **bf16, a, o);
    generate(model, **f32, b, o);
    EXPECT_EQ(a, b) << name;
  }
  EXPECT_EQ(open_source(kFixtures + "hf_matrix/gpt2_tied_fp32_single_hf4")->stored_dtype(),
            DType::kF32);
  EXPECT_EQ(open_source("preset:gpt2-tiny")->stored_dtype(), DType::kF32);
}

// zero eval's path (ModelWeights + forward_loss_sum + the same reduction) against the training
// Engine's eval_loss on the same model and batches: bitwise equal.
TEST(ModelWeights, EngineFreeEvalEqualsTheEngine) {
  std::unique_ptr<ModelSource> src = open_source("preset:gpt2-tiny");
  EngineOptions o;
  o.model_config = src->config();
  auto engine = Engine::create(o, src->init_fn());
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const model::ModelLayout layout(src->config());
  auto w = ModelWeights::load(layout, DType::kF32, src->init_fn());
  ASSERT_TRUE(w.ok());
  model::Transformer model(src->config());
  std::vector<MicroBatch> micro(3);
  const int64_t V = src->config().vocab_size;
  for (size_t m = 0; m < micro.size(); ++m) {
    micro[m].batch = 2;
    micro[m].seq = 9;
    for (int64_t i = 0; i < 18; ++i) {
      micro[m].tokens.push_back(static_cast<int32_t>((i * 7 + m * 3) % V));
      micro[m].targets.push_back(i % 5 == 4 ? -100 : static_cast<int32_t>((i * 11 + m) % V));
    }
  }
  auto want = (*engine)->eval_loss(micro);
  ASSERT_TRUE(want.ok());
  SelfCommunicator self;
  auto local = forward_loss_sum(model, **w, micro);
  ASSERT_TRUE(local.ok());
  auto got = all_reduce_loss_sum(self, *local);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->loss_sum, want->loss_sum);
  EXPECT_EQ(got->tokens, want->tokens);
  EXPECT_EQ(got->tokens, 3 * 18 - 3 * 3);
}

}  // namespace
}  // namespace zero::runtime
