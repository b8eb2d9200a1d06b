// KvDecoder against Transformer::forward (itself tested against PyTorch): the logits of every
// position, produced incrementally from the key/value cache, equal those of one full forward over
// the same tokens, for GPT-2, Llama (GQA, RoPE) and Llama 3 scaling with a tied head; and
// Phi-3's longrope, whose table switches past its original context, against the full forward of
// each length.
#include "model/kv_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
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

// Batched appends (ragged prompts in three slots of one cache, then decode rows of the slots still
// running beside a new prompt in a freed slot) against one single-slot decoder per sequence: the
// same logits. Reported: the largest difference (the GEMMs run over a different number of rows).
TEST_P(KvDecoderTest, BatchedSlotsGiveEachSequenceItsOwnLogits) {
  testing::GoldenModel golden = testing::load_golden(GetParam());
  const ModelLayout layout(golden.config);
  ResidentParams params(std::move(golden.units));
  const int64_t V = golden.config.vocab_size, capacity = 12;
  // Four sequences of 7, 3, 1 and 5 prompt tokens and a few more, one at a time.
  std::vector<std::vector<int32_t>> seqs(4);
  for (int64_t s = 0; s < 4; ++s) {
    for (int64_t t = 0; t < 12; ++t) {
      seqs[static_cast<size_t>(s)].push_back(static_cast<int32_t>((s * 101 + t * 37 + 5) % V));
    }
  }
  const int64_t prompt[4] = {7, 3, 1, 5};
  // Step 1: sequences 0, 1, 2 (slots 0, 1, 2) prefill; steps 2-3: one token each; step 4:
  // sequence 1 is done, sequence 3 prefills in its slot while 0 and 2 decode; steps 5-6: one each.
  struct Step {
    std::vector<std::pair<int64_t, int64_t>> seq_slot;
  };
  const std::vector<Step> steps = {{{{0, 0}, {1, 1}, {2, 2}}}, {{{0, 0}, {1, 1}, {2, 2}}},
                                   {{{2, 2}, {0, 0}, {1, 1}}}, {{{0, 0}, {3, 1}, {2, 2}}},
                                   {{{3, 1}, {0, 0}, {2, 2}}}, {{{0, 0}, {2, 2}, {3, 1}}}};
  KvDecoder batched(layout, capacity, 3);
  std::vector<std::unique_ptr<KvDecoder>> alone;
  for (int s = 0; s < 4; ++s) alone.push_back(std::make_unique<KvDecoder>(layout, capacity));
  std::vector<int64_t> read(4, 0);  // tokens of each sequence read so far
  double worst = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    std::vector<SlotTokens> entries;
    for (auto [seq, slot] : steps[k].seq_slot) {
      const int64_t n = read[static_cast<size_t>(seq)] == 0 ? prompt[seq] : 1;
      if (read[static_cast<size_t>(seq)] == 0) batched.reset_slot(slot);
      entries.push_back(
          {slot, seqs[static_cast<size_t>(seq)].data() + read[static_cast<size_t>(seq)], n});
    }
    std::vector<float> logits(entries.size() * static_cast<size_t>(V));
    batched.append_batch(params, entries, logits.data());
    for (size_t e = 0; e < entries.size(); ++e) {
      const int64_t seq = steps[k].seq_slot[e].first;
      std::vector<float> want(static_cast<size_t>(V));
      alone[static_cast<size_t>(seq)]->append(params, entries[e].tokens, entries[e].n, want.data());
      read[static_cast<size_t>(seq)] += entries[e].n;
      const double err = relative_error(logits.data() + e * static_cast<size_t>(V), want.data(), V);
      EXPECT_LT(err, 1e-6) << "step " << k << " sequence " << seq;
      worst = std::max(worst, err);
      EXPECT_EQ(batched.slot_length(entries[e].slot), read[static_cast<size_t>(seq)]);
    }
  }
  EXPECT_EQ(params.held(), 0);
  std::printf("%s: batched vs single-slot logits, largest relative difference %.2e\n",
              GetParam().c_str(), worst);
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

// Phi-3's longrope (tests/fixtures/hf_matrix/phi3_longrope_untied_fp32_single_hf5: original
// context 8, capacity 16): the logits of an append ending at L positions equal the full forward's
// of the first L tokens (the short table up to 8, the long one past it, as transformers' generate,
// which re-encodes the sequence on the step that passes 8). Appends that end within it, cross it
// one token at a time and several at a time, start past it, and restart after a reset.
class KvDecoderLongrope : public ::testing::Test {
 protected:
  KvDecoderLongrope()
      : golden_(
            testing::load_hf_dir(std::string(ZERO_SOURCE_DIR) +
                                 "/tests/fixtures/hf_matrix/phi3_longrope_untied_fp32_single_hf5")),
        layout_(golden_.config),
        params_(golden_.units) {
    for (int64_t s = 0; s < 4; ++s) {
      std::vector<int32_t>& seq = seqs_[static_cast<size_t>(s)];
      for (int64_t t = 0; t < kT; ++t)
        seq.push_back(static_cast<int32_t>((s * 29 + t * 37 + 11) % V()));
    }
  }
  int64_t V() const { return golden_.config.vocab_size; }
  // The full forward's logits at the last of the first `length` tokens of sequence `seq`.
  std::vector<float> full_forward(int64_t seq, int64_t length) {
    Transformer model(golden_.config);
    model.forward(params_, seqs_[static_cast<size_t>(seq)].data(), nullptr, 1, length);
    std::vector<float> out(static_cast<size_t>(V()));
    model.logits_at(0, length - 1, out.data());
    return out;
  }
  static constexpr int64_t kT = 16;
  testing::GoldenModel golden_;
  ModelLayout layout_;
  ResidentParams params_;
  std::vector<int32_t> seqs_[4];
};

TEST_F(KvDecoderLongrope, EveryAppendGivesTheFullForwardOfItsLength) {
  ASSERT_EQ(golden_.config.rope_scaling.type, "longrope");
  ASSERT_EQ(golden_.config.rope_scaling.original_max_position_embeddings, 8);
  // The tables differ enough to show: position 7's logits of 8 tokens (short) and of 9 (long).
  {
    Transformer model(golden_.config);
    model.forward(params_, seqs_[0].data(), nullptr, 1, 9);
    std::vector<float> long_at_7(static_cast<size_t>(V()));
    model.logits_at(0, 7, long_at_7.data());
    EXPECT_GT(relative_error(long_at_7.data(), full_forward(0, 8).data(), V()), 1e-2);
  }
  // (appends' sizes): within, crossing by one, past; within, crossing by four; starting past it.
  const std::vector<std::vector<int64_t>> schedules = {
      {3, 1, 1, 1, 1, 1, 1, 1, 1, 5}, {6, 4, 1, 5}, {11, 1, 4}};
  KvDecoder decoder(layout_, kT);  // reused: each schedule after a reset
  std::vector<float> logits(static_cast<size_t>(V()));
  for (size_t k = 0; k < schedules.size(); ++k) {
    decoder.reset();
    int64_t length = 0;
    for (const int64_t n : schedules[k]) {
      decoder.append(params_, seqs_[0].data() + length, n, logits.data());
      length += n;
      EXPECT_LT(relative_error(logits.data(), full_forward(0, length).data(), V()), 1e-5)
          << "schedule " << k << ", an append of " << n << " ending at " << length;
      EXPECT_EQ(decoder.length(), length);
    }
  }
  EXPECT_EQ(params_.held(), 0);
}

// Three slots crossing the original context at their own steps in shared appends (transformers'
// left-padded batch would switch them all when its longest row crosses: see longrope_switch.h):
// each gets its own sequence's full forward. A slot reset past the crossing starts short again.
TEST_F(KvDecoderLongrope, BatchedSlotsSwitchTablesAtTheirOwnLengths) {
  KvDecoder decoder(layout_, kT, 3);
  // (slot, sequence, tokens) per step; sequence 3 replaces sequence 1 in slot 1 at step 4.
  struct Entry {
    int64_t slot, seq, n;
  };
  const std::vector<std::vector<Entry>> steps = {
      {{0, 0, 7}, {1, 1, 2}, {2, 2, 10}},  // 0 and 1 short, 2 long from its prompt
      {{0, 0, 1}, {1, 1, 1}, {2, 2, 1}},   // 0 at 8: still short
      {{0, 0, 1}, {1, 1, 5}, {2, 2, 1}},   // 0 crosses alone; 1 at 8
      {{1, 1, 1}, {0, 0, 1}},              // 1 crosses
      {{1, 3, 3}, {0, 0, 2}},              // slot 1 reset: sequence 3 short again
      {{0, 0, 1}, {1, 3, 6}}};             // slot 1 crosses by six
  std::vector<int64_t> read(4, 0);         // tokens of each sequence read so far
  for (size_t k = 0; k < steps.size(); ++k) {
    std::vector<SlotTokens> entries;
    for (const Entry& e : steps[k]) {
      if (k == 4 && e.slot == 1) decoder.reset_slot(1);
      entries.push_back(
          {e.slot, seqs_[static_cast<size_t>(e.seq)].data() + read[static_cast<size_t>(e.seq)],
           e.n});
      read[static_cast<size_t>(e.seq)] += e.n;
    }
    std::vector<float> logits(entries.size() * static_cast<size_t>(V()));
    decoder.append_batch(params_, entries, logits.data());
    for (size_t i = 0; i < entries.size(); ++i) {
      const Entry& e = steps[k][i];
      const int64_t length = read[static_cast<size_t>(e.seq)];
      EXPECT_LT(relative_error(logits.data() + i * static_cast<size_t>(V()),
                               full_forward(e.seq, length).data(), V()),
                1e-5)
          << "step " << k << ", slot " << e.slot << " at " << length;
      EXPECT_EQ(decoder.slot_length(e.slot), length);
    }
  }
  EXPECT_EQ(params_.held(), 0);
}

TEST(KvDecoder, ABatchedAppendChecksItsSlots) {
  testing::GoldenModel golden = testing::load_golden("gpt2_tiny");
  ModelLayout layout(golden.config);
  ResidentParams params(std::move(golden.units));
  KvDecoder decoder(layout, 4, 2);
  const std::vector<int32_t> tokens = {1, 2, 3};
  std::vector<float> logits(2 * static_cast<size_t>(golden.config.vocab_size));
  const std::vector<SlotTokens> twice = {{0, tokens.data(), 1}, {0, tokens.data(), 1}};
  EXPECT_DEATH(decoder.append_batch(params, twice, logits.data()), "twice");
  const std::vector<SlotTokens> outside = {{2, tokens.data(), 1}};
  EXPECT_DEATH(decoder.append_batch(params, outside, logits.data()), "slot 2 of 2");
  const std::vector<SlotTokens> full = {{1, tokens.data(), 3}};
  decoder.append_batch(params, full, logits.data());
  const std::vector<SlotTokens> past = {{1, tokens.data(), 2}};
  EXPECT_DEATH(decoder.append_batch(params, past, logits.data()), "slot 1 exceed the capacity");
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
