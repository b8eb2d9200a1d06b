// KvDecoder against Transformer::forward (itself tested against PyTorch): the logits of every
// position, produced incrementally from the key/value cache, equal those of one full forward over
// the same tokens, for GPT-2, Llama (GQA, RoPE) and Llama 3 scaling with a tied head.
#include "model/kv_decoder.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/golden_testing.h"
#include "model/transformer.h"

namespace zero::model {
namespace {

using testing::ResidentParams;

// Largest |a - b| over a row, relative to the row's largest |b|.
double relative_error(const float* a, const float* b, int64_t n) {
  double err = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    err = std::max(err, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return err / scale;
}

class KvDecoderTest : public ::testing::TestWithParam<std::string> {};

TEST_P(KvDecoderTest, IncrementalLogitsEqualTheFullForward) {
  testing::GoldenModel golden = testing::load_golden(GetParam());
  Transformer model(golden.config);
  const ModelLayout& layout = model.layout();
  ResidentParams params(std::move(golden.units));
  const int64_t T = 16, V = golden.config.vocab_size;
  std::vector<int32_t> tokens(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) tokens[static_cast<size_t>(t)] = (t * 37 + 11) % V;
  model.forward(params, tokens.data(), nullptr, 1, T);

  // A prompt of 5 in one append, then one token at a time; and the whole sequence at once.
  KvDecoder decoder(layout, T);
  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<float> want(static_cast<size_t>(V));
  decoder.append(params, tokens.data(), 5, logits.data());
  model.logits_at(0, 4, want.data());
  EXPECT_LT(relative_error(logits.data(), want.data(), V), 1e-5) << "prompt";
  for (int64_t t = 5; t < T; ++t) {
    decoder.append(params, tokens.data() + t, 1, logits.data());
    model.logits_at(0, t, want.data());
    EXPECT_LT(relative_error(logits.data(), want.data(), V), 1e-5) << "position " << t;
  }
  EXPECT_EQ(decoder.length(), T);
  EXPECT_EQ(params.held(), 0);  // every acquire was released

  decoder.reset();
  decoder.append(params, tokens.data(), T, logits.data());
  EXPECT_LT(relative_error(logits.data(), want.data(), V), 1e-5) << "whole sequence";
}

INSTANTIATE_TEST_SUITE_P(Models, KvDecoderTest,
                         ::testing::Values("gpt2_tiny", "llama_tiny", "llama_tiny_llama3",
                                           "mistral_tiny_sliding_yarn", "gpt2_tiny_by_layer",
                                           "qwen2_tiny_sliding"));

// bf16 units widened where the decoder reads them: the logits of their fp32 values, bitwise.
TEST(KvDecoder, Bf16UnitsGiveTheLogitsOfTheirFp32Values) {
  for (const char* name : {"gpt2_tiny", "llama_tiny"}) {
    testing::GoldenModel golden = testing::load_golden(name);
    ModelLayout layout(golden.config);
    testing::TypedResidentParams typed(golden.units, DType::kBF16);
    ResidentParams wide(typed.widened());
    const std::vector<int32_t> tokens = {3, 1, 4, 1, 5, 9};
    std::vector<float> logits[2];
    for (int run = 0; run < 2; ++run) {
      KvDecoder decoder(layout, 8);
      std::vector<float> out(static_cast<size_t>(golden.config.vocab_size));
      ParamAccess& params = run == 0 ? static_cast<ParamAccess&>(typed) : wide;
      decoder.append(params, tokens.data(), 4, out.data());  // prefill, then one token at a time
      decoder.append(params, tokens.data() + 4, 1, out.data());
      decoder.append(params, tokens.data() + 5, 1, out.data());
      logits[run] = out;
    }
    EXPECT_EQ(logits[0], logits[1]) << name;
  }
}

TEST(KvDecoder, AppendingPastTheCapacityIsRefused) {
  testing::GoldenModel golden = testing::load_golden("gpt2_tiny");
  ModelLayout layout(golden.config);
  ResidentParams params(std::move(golden.units));
  KvDecoder decoder(layout, 3);
  std::vector<int32_t> tokens = {1, 2, 3, 4};
  std::vector<float> logits(static_cast<size_t>(golden.config.vocab_size));
  EXPECT_DEATH(decoder.append(params, tokens.data(), 4, logits.data()), "capacity");
}

}  // namespace
}  // namespace zero::model
