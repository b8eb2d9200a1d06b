// ShardLayout on odd shapes: units whose sizes are primes or smaller than the world, worlds 1-7
// (3, 5 and 7 included): padding, shard sizes, and every real element owned by exactly one rank.
#include "sharding/shard_layout.h"

#include <gtest/gtest.h>

#include "model/model_config.h"
#include "model/param_layout.h"

namespace zero::sharding {
namespace {

model::ModelLayout odd_layout() {
  auto c = model::preset_model_config("gpt2-tiny");
  EXPECT_TRUE(c.ok());
  c->vocab_size = 67;               // prime: the embedding unit is 67 x C (+ positions)
  c->max_position_embeddings = 13;  // prime
  c->hidden_size = 12;
  c->num_heads = 3;
  c->num_kv_heads = 3;
  c->intermediate_size = 29;  // prime
  c->num_layers = 3;
  return model::ModelLayout(*c);
}

class ShardLayoutWorlds : public ::testing::TestWithParam<int> {};

TEST_P(ShardLayoutWorlds, EveryElementHasExactlyOneOwner) {
  const int world = GetParam();
  const model::ModelLayout layout = odd_layout();
  int64_t total_owned = 0;
  for (int rank = 0; rank < world; ++rank) {
    const ShardLayout s(layout, world, rank);
    ASSERT_EQ(s.num_units(), layout.num_units());
    EXPECT_EQ(s.total_numel(), layout.total_numel());
    for (int u = 0; u < s.num_units(); ++u) {
      const UnitShardInfo& info = s.unit(u);
      EXPECT_EQ(info.numel, layout.unit(u).numel);
      EXPECT_EQ(info.padded_numel % (world * kShardAlignNumel), 0) << "unit " << u;
      EXPECT_GE(info.padded_numel, info.numel);
      EXPECT_LT(info.padded_numel - info.numel, world * kShardAlignNumel);  // minimal padding
      EXPECT_EQ(info.shard_numel * world, info.padded_numel);
      EXPECT_EQ(s.shard_begin(u), rank * info.shard_numel);
      const int64_t data = s.shard_data_numel(u, rank);
      EXPECT_GE(data, 0);
      EXPECT_LE(data, info.shard_numel);
      total_owned += data;
    }
    EXPECT_EQ(s.total_shard_numel() * world, s.total_padded_numel());
  }
  EXPECT_EQ(total_owned, layout.total_numel());
}

INSTANTIATE_TEST_SUITE_P(Worlds, ShardLayoutWorlds, ::testing::Values(1, 2, 3, 4, 5, 7));

}  // namespace
}  // namespace zero::sharding
