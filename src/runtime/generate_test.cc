// generate() against the plain definition of sampling: greedy decoding through the key/value cache
// picks, at every step, the argmax of a full Transformer::forward over the whole context.
#include "runtime/generate.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/golden_testing.h"
#include "model/transformer.h"
#include "runtime/device_generator.h"

namespace zero::runtime {
namespace {

using model::testing::ResidentParams;

struct Fixture {
  std::unique_ptr<model::Transformer> model;
  std::unique_ptr<ResidentParams> params;
};

Fixture load(const std::string& name) {
  model::testing::GoldenModel g = model::testing::load_golden(name);
  Fixture f;
  f.model = std::make_unique<model::Transformer>(g.config);
  f.params = std::make_unique<ResidentParams>(std::move(g.units));
  return f;
}

class Generate : public ::testing::TestWithParam<std::string> {};

TEST_P(Generate, GreedyEqualsArgmaxOfTheFullForward) {
  Fixture f = load(GetParam());
  const int64_t V = f.model->layout().config().vocab_size;
  std::vector<int32_t> prompt = {3, 14, 15};
  SamplingOptions o;
  o.max_new_tokens = 12;
  o.temperature = 0.0;
  std::vector<int32_t> got = prompt;
  generate(*f.model, *f.params, got, o);
  ASSERT_EQ(got.size(), prompt.size() + 12);

  std::vector<int32_t> want = prompt;
  std::vector<float> row(static_cast<size_t>(V));
  for (int i = 0; i < 12; ++i) {
    const int64_t T = static_cast<int64_t>(want.size());
    f.model->forward(*f.params, want.data(), nullptr, 1, T);
    f.model->logits_at(0, T - 1, row.data());
    want.push_back(static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
  }
  EXPECT_EQ(got, want);
}

// A stop token (the model's EOS) ends generation before it is appended: the output is the
// unstopped greedy run cut where that token first appears.
TEST_P(Generate, StopsAtAStopTokenWithoutAppendingIt) {
  Fixture f = load(GetParam());
  const std::vector<int32_t> prompt = {3, 14, 15};
  SamplingOptions o;
  o.max_new_tokens = 12;
  o.temperature = 0.0;
  std::vector<int32_t> full = prompt;
  EXPECT_FALSE(generate(*f.model, *f.params, full, o));
  const int32_t stop = full[prompt.size() + 4];
  const auto first =
      std::find(full.begin() + static_cast<std::ptrdiff_t>(prompt.size()), full.end(), stop);
  std::vector<int32_t> want(full.begin(), first);
  o.stop_tokens = {stop};
  std::vector<int32_t> got = prompt;
  EXPECT_TRUE(generate(*f.model, *f.params, got, o));
  EXPECT_EQ(got, want);
}

// Without the cache (the CUDA model's path, here on the CPU model): a whole forward per token over
// the same window gives the cached loop's tokens — greedy, and sampled with the same seed past the
// context limit (the oldest half dropped at the same steps), and it stops at the same stop token.
TEST_P(Generate, RecomputeGivesTheCachedTokens) {
  Fixture f = load(GetParam());
  SamplingOptions greedy;
  greedy.max_new_tokens = 12;
  greedy.temperature = 0.0;
  std::vector<int32_t> cached = {3, 14, 15}, recomputed = cached;
  EXPECT_FALSE(generate(*f.model, *f.params, cached, greedy));
  int calls = 0;
  EXPECT_FALSE(generate_recompute(
      *f.model, *f.params, recomputed, greedy, [](int32_t, void* n) { *static_cast<int*>(n) += 1; },
      &calls));
  EXPECT_EQ(calls, 12);
  EXPECT_EQ(recomputed, cached);

  SamplingOptions sampled;
  sampled.max_new_tokens = 20;
  sampled.context_limit = 6;
  sampled.temperature = 0.9;
  sampled.top_k = 5;
  sampled.seed = 7;
  cached = {1, 2, 3, 4, 5, 6, 7, 8};  // longer than the limit already
  recomputed = cached;
  generate(*f.model, *f.params, cached, sampled);
  generate_recompute(*f.model, *f.params, recomputed, sampled);
  ASSERT_EQ(cached.size(), 28u);
  EXPECT_EQ(recomputed, cached);

  sampled.stop_tokens = {cached[8 + 10]};
  cached.resize(8);
  recomputed.resize(8);
  EXPECT_TRUE(generate(*f.model, *f.params, cached, sampled));
  EXPECT_TRUE(generate_recompute(*f.model, *f.params, recomputed, sampled));
  EXPECT_EQ(recomputed, cached);
}

// DeviceGenerator (`zero generate --device`) on the CPU backend: the model and the key/value-cached
// decoder made for the device's context, the weights copied to its memory once, the cached loop's
// tokens (through its decoder and through whole forwards).
TEST_P(Generate, DeviceGeneratorGivesTheCachedTokens) {
  Fixture f = load(GetParam());
  auto on_device = DeviceGenerator::create(Device::kCpu, f.model->layout().config(), *f.params);
  ASSERT_TRUE(on_device.ok()) << on_device.status().to_string();
  SamplingOptions o;
  o.max_new_tokens = 10;
  o.temperature = 0.8;
  o.seed = 3;
  const std::vector<int32_t> prompt = {3, 14, 15};
  std::vector<int32_t> want = prompt;
  generate(*f.model, *f.params, want, o);
  for (auto decoding :
       {DeviceGenerator::Decoding::kCached, DeviceGenerator::Decoding::kRecompute}) {
    std::vector<int32_t> got = prompt;
    auto stopped = (*on_device)->generate(got, o, decoding);
    ASSERT_TRUE(stopped.ok()) << stopped.status().to_string();
    EXPECT_FALSE(*stopped);
    EXPECT_EQ(got, want);
  }
  EXPECT_GT((*on_device)->device_bytes(), 0);
}

INSTANTIATE_TEST_SUITE_P(Models, Generate, ::testing::Values("gpt2_tiny", "llama_tiny"));

// Past the context limit the oldest half is dropped: generation goes on, deterministic per seed.
TEST(Generate, ContinuesPastTheContextLimitAndIsDeterministic) {
  Fixture f = load("gpt2_tiny");
  const int64_t V = f.model->layout().config().vocab_size;
  SamplingOptions o;
  o.max_new_tokens = 20;
  o.context_limit = 6;
  o.top_k = 5;
  o.seed = 7;
  std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};  // longer than the limit already
  std::vector<int32_t> b = a;
  int calls = 0;
  generate(
      *f.model, *f.params, a, o, [](int32_t, void* n) { *static_cast<int*>(n) += 1; }, &calls);
  generate(*f.model, *f.params, b, o);
  EXPECT_EQ(calls, 20);
  ASSERT_EQ(a.size(), 28u);
  EXPECT_EQ(a, b);
  for (int32_t t : a) EXPECT_TRUE(t >= 0 && t < V);
}

// sampling_distribution against distributions computed by hand with HF's warper order
// (temperature, then top-k, then top-p; TopPLogitsWarper drops the tokens whose ascending
// cumulative probability is <= 1 - top_p, i.e. keeps the smallest prefix of the descending order
// whose sum reaches top_p).
std::vector<double> distribution(const std::vector<float>& logits, double temperature,
                                 int64_t top_k, double top_p) {
  SamplingOptions o;
  o.temperature = temperature;
  o.top_k = top_k;
  o.top_p = top_p;
  std::vector<double> probs;
  std::vector<int64_t> order;
  sampling_distribution(logits.data(), static_cast<int64_t>(logits.size()), o, &probs, &order);
  return probs;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-7) << "token " << i;
}

TEST(SamplingDistribution, TopPKeepsTheSmallestNucleusReachingP) {
  // probabilities 0.05, 0.5, 0.1, 0.2, 0.15 (shuffled so order is not the index order)
  const std::vector<float> logits = {std::log(0.05f), std::log(0.5f), std::log(0.1f),
                                     std::log(0.2f), std::log(0.15f)};
  // 0.5 + 0.2 = 0.7 < 0.8 <= 0.85 = 0.5 + 0.2 + 0.15: three tokens, renormalised by 0.85.
  expect_near(distribution(logits, 1.0, 0, 0.8), {0, 0.5 / 0.85, 0, 0.2 / 0.85, 0.15 / 0.85});
  // 0.5 alone reaches 0.3.
  expect_near(distribution(logits, 1.0, 0, 0.3), {0, 1, 0, 0, 0});
  // top_p = 1: the plain softmax.
  expect_near(distribution(logits, 1.0, 0, 1.0), {0.05, 0.5, 0.1, 0.2, 0.15});
}

TEST(SamplingDistribution, TopPAppliesAfterTemperatureAndTopK) {
  // T = 2: weights e^1, e^0.5, e^0, e^-0.5, e^-1; top-k 3 keeps the first three,
  // probabilities e/s, e^.5/s, 1/s with s = e + e^.5 + 1: 0.5065, 0.3072, 0.1863;
  // top-p 0.75: 0.5065 < 0.75 <= 0.8137, so the first two, renormalised.
  const std::vector<float> logits = {2, 1, 0, -1, -2};
  const double e1 = std::exp(1.0), e05 = std::exp(0.5);
  expect_near(distribution(logits, 2.0, 3, 0.75), {e1 / (e1 + e05), e05 / (e1 + e05), 0, 0, 0});
  // Without top-p: top-k 3 alone.
  const double s = e1 + e05 + 1.0;
  expect_near(distribution(logits, 2.0, 3, 1.0), {e1 / s, e05 / s, 1.0 / s, 0, 0});
}

}  // namespace
}  // namespace zero::runtime
