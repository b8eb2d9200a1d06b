// Steps and warmup from --max_steps / --num_train_epochs / --warmup_steps / --warmup_ratio, against
// HF Trainer's counts worked by hand (len(dataloader) = ceil(ceil(S / micro) / world), an epoch =
// max(ceil(len / grad_accum), 1) updates, steps = ceil(epochs * that); warmup = warmup_steps if > 0
// else ceil(ratio * steps)).
#include "runtime/train_steps.h"

#include <gtest/gtest.h>

namespace zero::runtime {
namespace {

TEST(TrainSteps, EpochsCountedAsHfTrainer) {
  // 100 samples, micro 4: 25 batches, 25 updates an epoch.
  EXPECT_EQ(*steps_for_epochs(1, {100, 4, 1, 1}), 25);
  EXPECT_EQ(*steps_for_epochs(2.5, {100, 4, 1, 1}), 63);  // ceil(62.5)
  // 101 samples: a 26th (short) batch; HF counts it.
  EXPECT_EQ(*steps_for_epochs(1, {101, 4, 1, 1}), 26);
  // 2 ranks: 26 batches sharded with even batches -> 13 each.
  EXPECT_EQ(*steps_for_epochs(1, {101, 4, 1, 2}), 13);
  // 3 ranks: ceil(26 / 3) = 9; accumulation 4: ceil(9 / 4) = 3 updates an epoch.
  EXPECT_EQ(*steps_for_epochs(1, {101, 4, 4, 3}), 3);
  EXPECT_EQ(*steps_for_epochs(3, {101, 4, 4, 3}), 9);
  // Fewer samples than one global batch: still one update an epoch.
  EXPECT_EQ(*steps_for_epochs(2, {3, 8, 4, 2}), 2);
  // 0.5 epoch of 25 updates: ceil(12.5) = 13.
  EXPECT_EQ(*steps_for_epochs(0.5, {100, 4, 1, 1}), 13);
}

TEST(TrainSteps, MaxStepsWinsAndOneIsRequired) {
  EXPECT_EQ(*resolve_max_steps(7, 3.0, {100, 4, 1, 1}), 7);
  EXPECT_EQ(*resolve_max_steps(0, 3.0, {100, 4, 1, 1}), 75);
  EXPECT_EQ(resolve_max_steps(0, std::nullopt, {100, 4, 1, 1}).status().message(),
            "--max_steps (or --num_train_epochs) is required");
  EXPECT_EQ(*resolve_max_steps(-1, 1.0, {100, 4, 1, 1}), 25);  // HF's default -1: the epochs
  EXPECT_EQ(resolve_max_steps(-1, std::nullopt, {100, 4, 1, 1}).status().message(),
            "--max_steps -1: must be > 0 (or give --num_train_epochs)");
  EXPECT_NE(resolve_max_steps(0, 0.0, {100, 4, 1, 1})
                .status()
                .message()
                .find("--num_train_epochs must be a number > 0"),
            std::string::npos);
  EXPECT_FALSE(steps_for_epochs(-1, {100, 4, 1, 1}).ok());
  EXPECT_FALSE(steps_for_epochs(1e300, {100, 4, 1, 1}).ok());
}

TEST(TrainSteps, WarmupAsTrainingArguments) {
  std::string note;
  EXPECT_EQ(*resolve_warmup_steps(std::nullopt, std::nullopt, 25, &note), std::nullopt);
  EXPECT_EQ(*resolve_warmup_steps(0, std::nullopt, 25, &note), 0);
  EXPECT_EQ(*resolve_warmup_steps(std::nullopt, 0.1, 25, &note), 3);  // ceil(2.5)
  EXPECT_EQ(*resolve_warmup_steps(0, 0.1, 25, &note), 3);             // 0 steps: the ratio counts
  // Python's ceil(100 * 0.07) is 8 (100 * 0.07 = 7.000000000000001 in binary floating point).
  EXPECT_EQ(*resolve_warmup_steps(std::nullopt, 0.07, 100, &note), 8);
  EXPECT_TRUE(note.empty());
  EXPECT_EQ(*resolve_warmup_steps(5, 0.1, 25, &note), 5);
  EXPECT_NE(note.find("--warmup_steps wins"), std::string::npos);
  EXPECT_FALSE(resolve_warmup_steps(std::nullopt, 1.5, 25, &note).ok());
  EXPECT_FALSE(resolve_warmup_steps(-1, std::nullopt, 25, &note).ok());
}

TEST(TrainSteps, WarmupStepsFlagTakesARatioAsTransformers5) {
  std::optional<int64_t> steps;
  std::optional<double> ratio;
  ASSERT_TRUE(split_warmup_steps_flag(10, &steps, &ratio).ok());
  EXPECT_EQ(steps, 10);
  EXPECT_EQ(ratio, std::nullopt);
  steps.reset();
  ASSERT_TRUE(split_warmup_steps_flag(0.1, &steps, &ratio).ok());
  EXPECT_EQ(steps, std::nullopt);
  EXPECT_EQ(ratio, 0.1);
  EXPECT_NE(split_warmup_steps_flag(0.2, &steps, &ratio).message().find("give one"),
            std::string::npos);
  ratio.reset();
  EXPECT_FALSE(split_warmup_steps_flag(1.5, &steps, &ratio).ok());
  EXPECT_FALSE(split_warmup_steps_flag(-3, &steps, &ratio).ok());
  ASSERT_TRUE(split_warmup_steps_flag(0, &steps, &ratio).ok());
  EXPECT_EQ(steps, 0);
}

}  // namespace
}  // namespace zero::runtime
