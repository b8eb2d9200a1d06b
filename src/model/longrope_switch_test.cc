// LongropeSwitch's bookkeeping: which appends use the long table and which re-encode their slot
// (the decoders' logits are tested against the full forward in kv_decoder_test.cc and against
// transformers' generate in hf_matrix_test.cc).
#include "model/longrope_switch.h"

#include <vector>

#include <gtest/gtest.h>

namespace zero::model {
namespace {

kernels::cpu::RopeScaling longrope(int64_t original) {
  kernels::cpu::RopeScaling s;
  s.type = "longrope";
  s.original_max_position_embeddings = original;
  s.short_factor = {1.0, 1.0};
  s.long_factor = {2.0, 2.0};
  return s;
}

std::vector<int32_t> tokens_of(const SlotTokens& e) {
  return std::vector<int32_t>(e.tokens, e.tokens + e.n);
}

TEST(LongropeSwitch, InactiveUnlessLongropePastItsOriginalContext) {
  kernels::cpu::RopeScaling yarn = longrope(4);
  yarn.type = "yarn";
  for (const auto& [scaling, capacity] :
       {std::pair{yarn, int64_t{8}}, std::pair{longrope(4), int64_t{4}}}) {
    LongropeSwitch s(scaling, capacity, 1);
    EXPECT_FALSE(s.active());
    EXPECT_FALSE(s.long_table(capacity + 1));
    EXPECT_EQ(s.short_table_length(capacity), capacity);
    const int32_t t[] = {1, 2, 3, 4};
    const std::vector<SlotTokens> entries = {{0, t, 4}};
    std::vector<int64_t> lengths = {0};
    const auto run = s.entries_to_run(entries, lengths);
    EXPECT_EQ(run.data(), entries.data());  // as given
  }
  LongropeSwitch s(longrope(4), 5, 1);
  EXPECT_TRUE(s.active());
  EXPECT_EQ(s.short_table_length(5), 4);
  EXPECT_FALSE(s.long_table(4));
  EXPECT_TRUE(s.long_table(5));
}

// Slot 0 crosses by one token, slot 1 by three from 2 (beside it), slot 2 starts past the original
// context; then slot 0 is reset and starts again within it.
TEST(LongropeSwitch, TheAppendThatCrossesRunsTheSlotFromPositionZero) {
  LongropeSwitch s(longrope(4), 10, 3);
  std::vector<int64_t> lengths = {0, 0, 0};
  const int32_t a[] = {10, 11, 12, 13, 14}, b[] = {20, 21, 22, 23, 24}, c[] = {30, 31, 32, 33, 34};
  auto append = [&](const std::vector<SlotTokens>& entries) {
    const auto run = s.entries_to_run(entries, lengths);
    std::vector<SlotTokens> out(run.begin(), run.end());
    for (const SlotTokens& e : out) lengths[static_cast<size_t>(e.slot)] += e.n;  // the decoder's
    return out;
  };
  auto run = append({{0, a, 3}, {1, b, 2}, {2, c, 5}});
  ASSERT_EQ(run.size(), 3u);
  EXPECT_EQ(tokens_of(run[2]), std::vector<int32_t>({30, 31, 32, 33, 34}));  // long, no re-encode
  run = append({{0, a + 3, 1}, {1, b + 2, 3}});
  EXPECT_EQ(tokens_of(run[0]), std::vector<int32_t>({13}));                  // ends at 4: short
  EXPECT_EQ(tokens_of(run[1]), std::vector<int32_t>({20, 21, 22, 23, 24}));  // 2 -> 5
  EXPECT_EQ(lengths, std::vector<int64_t>({4, 5, 5}));
  run = append({{1, b, 1}, {0, a + 4, 1}, {2, c, 1}});
  EXPECT_EQ(tokens_of(run[0]), std::vector<int32_t>({20}));                  // past it already
  EXPECT_EQ(tokens_of(run[1]), std::vector<int32_t>({10, 11, 12, 13, 14}));  // 4 -> 5
  EXPECT_EQ(tokens_of(run[2]), std::vector<int32_t>({30}));
  EXPECT_EQ(lengths, std::vector<int64_t>({5, 6, 6}));
  lengths[0] = 0;  // reset_slot(0)
  run = append({{0, b, 2}});
  run = append({{0, c, 3}});
  EXPECT_EQ(tokens_of(run[0]), std::vector<int32_t>({20, 21, 30, 31, 32}));  // 2 -> 5
}

}  // namespace
}  // namespace zero::model
