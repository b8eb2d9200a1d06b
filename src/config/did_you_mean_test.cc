// Tests for typo suggestions.
#include "config/did_you_mean.h"

#include <gtest/gtest.h>

namespace zero::config {
namespace {

TEST(DidYouMean, EditDistance) {
  EXPECT_EQ(edit_distance("", "abc"), 3);
  EXPECT_EQ(edit_distance("abc", "abc"), 0);
  EXPECT_EQ(edit_distance("abc", "acb"), 1);  // transposition
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
}

TEST(DidYouMean, ProbableTypos) {
  EXPECT_TRUE(is_probable_typo("gradient_clipin", "gradient_clipping"));
  EXPECT_TRUE(is_probable_typo("zero_optimisation", "zero_optimization"));
  EXPECT_TRUE(is_probable_typo("stage3_prefetch_bucket_sise", "stage3_prefetch_bucket_size"));
  EXPECT_TRUE(is_probable_typo("Enabled", "enabled"));
  EXPECT_TRUE(is_probable_typo("offload-optimizer", "offload_optimizer"));
  EXPECT_FALSE(is_probable_typo("comms_config", "comms_logger"));
  EXPECT_FALSE(is_probable_typo("cuda_visible_devices", "csv_monitor"));
  EXPECT_FALSE(is_probable_typo("lr", "eps"));
}

TEST(DidYouMean, PicksClosest) {
  std::string_view keys[] = {"stage", "reduce_bucket_size", "allgather_bucket_size"};
  EXPECT_EQ(did_you_mean("reduce_bucket_sizes", keys), "reduce_bucket_size");
  EXPECT_FALSE(did_you_mean("something_else", keys).has_value());
}

}  // namespace
}  // namespace zero::config
