// Evaluator: every validation sample counted once whatever the world size and batch, and the eval
// loss of a model equal to the training loss of the same samples (train_step reports the loss
// before its update, the mean token cross-entropy of its global batch).
#include "runtime/evaluation.h"
#include "runtime/engine.h"

#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "core/storage.h"
#include "model/hf_checkpoint.h"

namespace zero::runtime {
namespace {

const std::string kGolden = std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/golden/";

TokenDataset open_tokens(int64_t block) {
  TokenDatasetOptions o;
  o.block_size = block;
  o.vocab_size = 67;  // gpt2_tiny
  auto data = TokenDataset::open(*default_storage(), kGolden + "tokens.bin", o);
  EXPECT_TRUE(data.ok()) << data.status().to_string();
  return std::move(*data);
}

TEST(Evaluator, EverySampleOnceForAnyWorldAndBatch) {
  const TokenDataset data = open_tokens(16);  // 200 samples
  for (int world : {1, 2, 3, 7}) {
    for (int64_t batch : {1, 3, 8, 500}) {
      std::multiset<int64_t> seen;
      int64_t rounds = -1;
      for (int rank = 0; rank < world; ++rank) {
        Evaluator e(&data, batch, world, rank);
        if (rounds < 0) rounds = e.num_rounds();
        EXPECT_EQ(e.num_rounds(), rounds) << "every rank runs the same rounds";
        for (int64_t i = 0; i < e.num_rounds(); ++i) {
          const auto s = e.samples(i, rank);
          EXPECT_LE(static_cast<int64_t>(s.size()), batch);
          seen.insert(s.begin(), s.end());
        }
      }
      ASSERT_EQ(static_cast<int64_t>(seen.size()), data.num_samples())
          << "world " << world << " batch " << batch;
      int64_t want = 0;
      for (int64_t g : seen) EXPECT_EQ(g, want++);
      EXPECT_EQ(rounds, (data.num_samples() + batch * world - 1) / (batch * world));
    }
  }
}

std::unique_ptr<Engine> golden_engine(std::unique_ptr<model::HfWeightReader>& reader) {
  auto config = model::load_model_config(kGolden + "gpt2_tiny");
  EXPECT_TRUE(config.ok());
  EngineOptions o;
  o.model_config = *config;
  model::ModelLayout layout(o.model_config);
  auto r = model::HfWeightReader::open(*default_storage(), kGolden + "gpt2_tiny", layout);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  reader = std::move(*r);
  model::HfWeightReader* p = reader.get();
  auto engine = Engine::create(std::move(o), [p](int u, int64_t b, int64_t e, float* dst) {
    return p->read_unit_range(u, b, e, dst);
  });
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  return std::move(*engine);
}

// 200 samples in rounds of 7 (the last one padded) against one training step over the same 200
// samples in 40 micro-batches of 5 (equal token counts, so the mean of micro-batch means is the
// token mean): the same mean token cross-entropy, and evaluating changes nothing.
TEST(Evaluator, EvalLossEqualsTheTrainingLossOfTheSameSamples) {
  const TokenDataset data = open_tokens(16);
  std::unique_ptr<model::HfWeightReader> reader;
  std::unique_ptr<Engine> engine = golden_engine(reader);
  Evaluator eval(&data, 7, 1, 0);
  auto first = eval.run(*engine);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->tokens, 200 * 16);
  EXPECT_NEAR(first->perplexity, std::exp(first->loss), 1e-9 * first->perplexity);
  auto again = eval.run(*engine);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->loss, first->loss) << "evaluation must not change the model";
  EXPECT_EQ(engine->global_step(), 0);

  std::vector<MicroBatch> micro(40);
  for (int m = 0; m < 40; ++m) {
    MicroBatch& mb = micro[static_cast<size_t>(m)];
    mb.batch = 5;
    mb.seq = 16;
    mb.tokens.resize(5 * 16);
    mb.targets.resize(5 * 16);
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(
          data.get_sample(m * 5 + i, mb.tokens.data() + i * 16, mb.targets.data() + i * 16).ok());
    }
  }
  auto step = engine->train_step(micro);
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  EXPECT_NEAR(first->loss, step->loss, 1e-6 * step->loss);
  // After the update the eval loss moves (the model changed).
  auto after = eval.run(*engine);
  ASSERT_TRUE(after.ok());
  EXPECT_NE(after->loss, first->loss);
}

}  // namespace
}  // namespace zero::runtime
