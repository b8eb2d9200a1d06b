// generate() against the plain definition of sampling: greedy decoding through the key/value cache
// picks, at every step, the argmax of a full Transformer::forward over the whole context.
#include "runtime/generate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

// Records what a batch reports: each sequence's tokens as they came and how it ended. Sequences
// listed in stop_after end (FinishReason::kStop) after that many new tokens; on_finish fails from
// the fail_at-th call on (0: never).
class Recorder final : public BatchObserver {
 public:
  explicit Recorder(size_t n) : tokens(n), reasons(n) {}
  bool on_token(int64_t i, int32_t token) override {
    tokens[static_cast<size_t>(i)].push_back(token);
    auto it = stop_after.find(i);
    return it != stop_after.end() &&
           static_cast<int64_t>(tokens[static_cast<size_t>(i)].size()) == it->second;
  }
  Status on_finish(int64_t i, FinishReason reason) override {
    if (fail_at > 0 && ++finishes >= fail_at) return io_error("disk full at prompt {}", i);
    reasons[static_cast<size_t>(i)] = reason;
    finished.push_back(i);
    return ok_status();
  }
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::optional<FinishReason>> reasons;
  std::vector<int64_t> finished;  // in finishing order
  std::map<int64_t, int64_t> stop_after;
  int fail_at = 0, finishes = 0;
};

// Five ragged prompts (1 to 9 tokens), each with its own max_new_tokens and seed.
std::vector<BatchSequence> five_prompts(const SamplingOptions& o) {
  std::vector<BatchSequence> seqs(5);
  const int64_t lengths[5] = {4, 1, 9, 2, 6}, new_tokens[5] = {10, 7, 12, 3, 9};
  for (int64_t i = 0; i < 5; ++i) {
    BatchSequence& s = seqs[static_cast<size_t>(i)];
    for (int64_t t = 0; t < lengths[i]; ++t)
      s.tokens.push_back(static_cast<int32_t>(3 + 7 * i + t));
    s.options = o;
    s.options.max_new_tokens = new_tokens[i];
    s.options.seed = sequence_seed(o.seed, i);
  }
  return seqs;
}

// Each sequence of a batch gets the tokens generate() gives it alone, whatever the batch size (1:
// one at a time; 2 and 3: slots handed from finished sequences to waiting ones; 5: all at once):
// greedy, sampled (temperature, top-k, top-p, repetition penalty; each sequence its own RNG
// stream), and past a context limit of 6 (windows re-read inside the batch).
TEST_P(Generate, BatchedTokensEqualOneAtATime) {
  Fixture f = load(GetParam());
  SamplingOptions greedy;
  greedy.temperature = 0.0;
  SamplingOptions sampled;
  sampled.temperature = 0.9;
  sampled.top_k = 10;
  sampled.top_p = 0.9;
  sampled.repetition_penalty = 1.3;
  sampled.seed = 7;
  SamplingOptions limited = sampled;
  limited.context_limit = 6;
  for (const SamplingOptions& o : {greedy, sampled, limited}) {
    std::vector<BatchSequence> want = five_prompts(o);
    for (BatchSequence& s : want) generate(*f.model, *f.params, s.tokens, s.options);
    for (int64_t slots : {1, 2, 3, 5}) {
      SCOPED_TRACE("temperature " + std::to_string(o.temperature) + ", context_limit " +
                   std::to_string(o.context_limit) + ", slots " + std::to_string(slots));
      std::vector<BatchSequence> got = five_prompts(o);
      Recorder recorder(got.size());
      ASSERT_TRUE(generate_batch(*f.model, *f.params, got, slots, recorder).ok());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].tokens, want[i].tokens) << "sequence " << i;
        EXPECT_EQ(recorder.reasons[i], FinishReason::kLength);
        const std::vector<int32_t> new_tokens(got[i].tokens.end() - got[i].options.max_new_tokens,
                                              got[i].tokens.end());
        EXPECT_EQ(recorder.tokens[i], new_tokens);
      }
      EXPECT_EQ(recorder.finished.size(), got.size());
    }
  }
}

// Per-sequence ends: a stop token (not appended: kEos), the observer (a stop string: kStop, the
// token kept), max_new_tokens (kLength; 0: at once, no token).
TEST_P(Generate, EachSequenceEndsForItsOwnReason) {
  Fixture f = load(GetParam());
  SamplingOptions o;
  o.temperature = 0.0;
  std::vector<BatchSequence> full = five_prompts(o);
  Recorder unstopped(full.size());
  ASSERT_TRUE(generate_batch(*f.model, *f.params, full, 5, unstopped).ok());

  std::vector<BatchSequence> seqs = five_prompts(o);
  const size_t prompt0 = seqs[0].tokens.size();
  const int32_t stop = full[0].tokens[prompt0 + 3];
  seqs[0].options.stop_tokens = {stop};
  seqs[3].options.max_new_tokens = 0;
  Recorder recorder(seqs.size());
  recorder.stop_after[2] = 4;
  ASSERT_TRUE(generate_batch(*f.model, *f.params, seqs, 3, recorder).ok());
  const auto first_stop = std::find(full[0].tokens.begin() + static_cast<std::ptrdiff_t>(prompt0),
                                    full[0].tokens.end(), stop);
  EXPECT_EQ(seqs[0].tokens, std::vector<int32_t>(full[0].tokens.begin(), first_stop));
  EXPECT_EQ(recorder.reasons[0], FinishReason::kEos);
  EXPECT_EQ(seqs[2].tokens, std::vector<int32_t>(full[2].tokens.begin(), full[2].tokens.end() - 8));
  EXPECT_EQ(recorder.reasons[2], FinishReason::kStop);
  EXPECT_EQ(seqs[3].tokens.size(), 2u);
  EXPECT_EQ(recorder.reasons[3], FinishReason::kLength);
  EXPECT_EQ(seqs[1].tokens, full[1].tokens);
  EXPECT_EQ(seqs[4].tokens, full[4].tokens);
}

// An error from on_finish ends the batch with it; the sequences finished before stay reported.
TEST_P(Generate, AFailingFinishEndsTheBatchKeepingTheFinishedOnes) {
  Fixture f = load(GetParam());
  SamplingOptions o;
  o.temperature = 0.0;
  std::vector<BatchSequence> seqs = five_prompts(o);
  Recorder recorder(seqs.size());
  recorder.fail_at = 3;
  const Status status = generate_batch(*f.model, *f.params, seqs, 2, recorder);
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_NE(status.message().find("disk full"), std::string::npos);
  EXPECT_EQ(recorder.finished.size(), 2u);
}

// DeviceGenerator's batch (CPU backend): the CPU model's batch tokens.
TEST_P(Generate, DeviceGeneratorBatchGivesTheCpuTokens) {
  Fixture f = load(GetParam());
  auto on_device = DeviceGenerator::create(Device::kCpu, f.model->layout().config(), *f.params);
  ASSERT_TRUE(on_device.ok()) << on_device.status().to_string();
  SamplingOptions o;
  o.temperature = 0.8;
  o.seed = 3;
  std::vector<BatchSequence> want = five_prompts(o), got = five_prompts(o);
  Recorder a(want.size()), b(got.size());
  ASSERT_TRUE(generate_batch(*f.model, *f.params, want, 3, a).ok());
  ASSERT_TRUE((*on_device)->generate_batch(got, 3, b).ok());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].tokens, want[i].tokens) << i;
}

INSTANTIATE_TEST_SUITE_P(Models, Generate, ::testing::Values("gpt2_tiny", "llama_tiny"));

// Sequence i of a batch samples from its own stream; sequence 0 from the run's seed.
TEST(SequenceSeed, IsTheSeedForIndexZeroAndDistinctAfter) {
  EXPECT_EQ(sequence_seed(42, 0), 42u);
  EXPECT_NE(sequence_seed(42, 1), sequence_seed(42, 2));
  EXPECT_NE(sequence_seed(42, 1), 43u);
}

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

// sampling_distribution and the repetition penalty against transformers' own logits processors
// (tests/fixtures/golden/sampling_hf5.json, tools/golden/make_sampling_fixture.py): the
// distribution generate() samples from equals RepetitionPenaltyLogitsProcessor -> Temperature ->
// TopK -> TopP -> softmax computed in fp64, within 1e-6 per token (the penalty is applied to fp32
// logits here); greedy picks transformers' argmax of the penalised logits.
TEST(SamplingDistribution, MatchesTransformersLogitsProcessors) {
  const nlohmann::json fixture = nlohmann::json::parse(
      std::ifstream(std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/golden/sampling_hf5.json"));
  const int64_t V = fixture["vocab_size"].get<int64_t>();
  ASSERT_EQ(fixture["cases"].size(), 8u);
  double worst = 0;
  for (size_t c = 0; c < fixture["cases"].size(); ++c) {
    const nlohmann::json& k = fixture["cases"][c];
    SCOPED_TRACE("case " + std::to_string(c));
    std::vector<float> logits = k["logits"].get<std::vector<float>>();
    ASSERT_EQ(static_cast<int64_t>(logits.size()), V);
    const auto history = k["history"].get<std::vector<int32_t>>();
    apply_repetition_penalty(logits.data(), V, history, k["repetition_penalty"].get<double>());
    if (k.contains("greedy")) {
      EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(),
                k["greedy"].get<int64_t>());
      continue;
    }
    const std::vector<double> got =
        distribution(logits, k["temperature"].get<double>(), k["top_k"].get<int64_t>(),
                     k["top_p"].get<double>());
    const auto want = k["probs"].get<std::vector<double>>();
    for (int64_t v = 0; v < V; ++v) {
      EXPECT_NEAR(got[static_cast<size_t>(v)], want[static_cast<size_t>(v)], 1e-6) << "token " << v;
      EXPECT_EQ(got[static_cast<size_t>(v)] == 0, want[static_cast<size_t>(v)] == 0)
          << "token " << v;
      worst =
          std::max(worst, std::fabs(got[static_cast<size_t>(v)] - want[static_cast<size_t>(v)]));
    }
  }
  std::printf("sampling vs transformers' logits processors: largest probability difference %.2e\n",
              worst);
}

}  // namespace
}  // namespace zero::runtime
