// generate() against the plain definition of sampling: greedy decoding through the key/value cache
// picks, at every step, the argmax of a full Transformer::forward over the whole context.
#include "runtime/generate.h"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/golden_testing.h"
#include "model/transformer.h"

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

}  // namespace
}  // namespace zero::runtime
