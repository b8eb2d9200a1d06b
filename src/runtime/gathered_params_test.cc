// Stage-3 inference's parameter source on CPU ranks (`zero generate` / `zero eval` under a launcher
// with --device cpu): ranks on threads, each holding its shard of every unit, give the tokens and
// eval loss of one rank with the whole weights, bitwise; with the blocks' shards in each rank's own
// swap file (--offload_param nvme) too, and the host then holds only the other units' shards and
// two staging buffers; a failed read on one rank ends the job naming the rank and the block.
#include "runtime/gathered_params.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "comm/thread_communicator.h"
#include "model/init.h"
#include "model/model_config.h"
#include "model/transformer.h"
#include "runtime/batch.h"
#include "runtime/generate.h"
#include "runtime/model_source.h"
#include "runtime/model_weights.h"
#include "sharding/shard_layout.h"

namespace zero::runtime {
namespace {

model::ModelConfig five_layer_llama() {
  auto source = ModelSource::open("preset:llama-tiny", 42);
  EXPECT_TRUE(source.ok()) << source.status().to_string();
  model::ModelConfig c = (*source)->config();
  c.num_layers = 5;
  return c;
}

// Counts the swapper's reads; fails those after the first `ok_reads`.
class CountingReads final : public offload::NvmeFaultHook {
 public:
  explicit CountingReads(int ok_reads = 1 << 30) : left_(ok_reads) {}
  int64_t on_completion(const offload::IoRequestInfo& request, int64_t result) override {
    if (request.is_write) return result;
    ++reads_;
    return left_.fetch_sub(1) > 0 ? result : -EIO;
  }
  int reads() const { return reads_.load(); }

 private:
  std::atomic<int> left_;
  std::atomic<int> reads_{0};
};

class GatheredParamsTest : public ::testing::Test {
 protected:
  GatheredParamsTest() : config_(five_layer_llama()), layout_(config_) {
    init_ = [this](int u, int64_t begin, int64_t end, float* dst) {
      model::init_unit_range(layout_, u, 3, begin, end, dst);
      return ok_status();
    };
    sampled_.temperature = 1.0;
    sampled_.seed = 11;
    sampled_.max_new_tokens = 4;
    micro_.resize(1);
    micro_[0].batch = 2;
    micro_[0].seq = 5;
    for (int i = 0; i < 10; ++i) {
      micro_[0].tokens.push_back((i * 31 + 7) % 256);
      micro_[0].targets.push_back((i * 17 + 3) % 256);
    }
  }
  std::string nvme_dir() const {
    return ::testing::TempDir() + "zero_gathered_nvme_" +
           std::to_string(::testing::UnitTest::GetInstance()->random_seed());
  }
  // This rank's shard bytes of the blocks (fp32).
  int64_t block_shard_bytes(int world, int rank) const {
    const sharding::ShardLayout shards(layout_, world, rank);
    int64_t numel = 0;
    for (int l = 0; l < config_.num_layers; ++l) {
      numel += shards.unit(layout_.block_unit(l)).shard_numel;
    }
    return numel * static_cast<int64_t>(sizeof(float));
  }

  model::ModelConfig config_;
  model::ModelLayout layout_;
  UnitInitFn init_;
  SamplingOptions sampled_;
  std::vector<MicroBatch> micro_;
};

// Worlds 2 and 3 (blocks that do not divide into the shards: the padding written, read and
// gathered too), shards in host memory and in each rank's swap file: every rank's sampled tokens
// and eval loss are the whole weights', bitwise. With NVMe each forward reads every block shard
// once (the first read, then one block ahead, cyclically), the host holds the block shards no
// more (two staging buffers of the largest instead), and every rank's swap directory is its own
// and gone with its GatheredParams.
TEST_F(GatheredParamsTest, ShardsInMemoryOrOnNvmeGiveTheWholeWeightsTokens) {
  auto whole = ModelWeights::load(layout_, DType::kF32, init_);
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  model::Transformer model(config_);
  std::vector<int32_t> want = {3, 14, 15, 92};
  generate(model, **whole, want, sampled_);
  auto want_loss = forward_loss_sum(model, **whole, micro_);
  ASSERT_TRUE(want_loss.ok()) << want_loss.status().to_string();
  const int L = config_.num_layers;
  for (int world : {2, 3}) {
    for (bool nvme : {false, true}) {
      SCOPED_TRACE(testing::Message() << "world " << world << (nvme ? ", nvme" : ", in memory"));
      std::mutex mu;
      std::vector<std::vector<int32_t>> got(static_cast<size_t>(world));
      std::vector<std::string> dirs;
      ThreadCommunicator::run(world, [&](Communicator& comm) {
        CountingReads reads;
        GatheredParams::Options o;
        if (nvme) {
          o.nvme_path = nvme_dir();
          o.fault_hook = &reads;
        }
        std::string dir;
        {
          auto params = GatheredParams::create(layout_, comm, init_, o);
          ASSERT_TRUE(params.ok()) << params.status().to_string();
          GatheredParams& p = **params;
          const sharding::ShardLayout shards(layout_, world, comm.rank());
          int64_t all_numel = 0, max_block_numel = 0;
          for (int u = 0; u < layout_.num_units(); ++u) all_numel += shards.unit(u).shard_numel;
          for (int l = 0; l < L; ++l) {
            max_block_numel =
                std::max(max_block_numel, shards.unit(layout_.block_unit(l)).shard_numel);
          }
          const int64_t blocks = block_shard_bytes(world, comm.rank());
          const int64_t all = all_numel * static_cast<int64_t>(sizeof(float));
          EXPECT_EQ(p.shard_bytes(), nvme ? all - blocks : all);
          EXPECT_EQ(p.nvme_bytes(), nvme ? blocks : 0);
          EXPECT_EQ(p.staging_bytes(), nvme ? 2 * max_block_numel * 4 : 0);
          model::Transformer rank_model(config_);  // its buffers are this thread's
          std::vector<int32_t> tokens = {3, 14, 15, 92};
          generate(rank_model, p, tokens, sampled_);
          auto loss = forward_loss_sum(rank_model, p, micro_);
          ASSERT_TRUE(loss.ok()) << loss.status().to_string();
          EXPECT_EQ(loss->loss_sum, want_loss->loss_sum) << "rank " << comm.rank();  // bitwise
          EXPECT_EQ(loss->tokens, want_loss->tokens);
          if (nvme) {
            EXPECT_GT(reads.reads(), L);
            EXPECT_EQ((reads.reads() - 1) % L, 0) << reads.reads();
          }
          dir = p.swap_dir();
          EXPECT_EQ(dir.empty(), !nvme);
          std::lock_guard<std::mutex> lock(mu);
          got[static_cast<size_t>(comm.rank())] = tokens;
          if (nvme) dirs.push_back(dir);
        }
        if (nvme) {
          EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
        }
      });
      for (int r = 0; r < world; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], want) << "rank " << r;
      std::sort(dirs.begin(), dirs.end());
      EXPECT_EQ(std::unique(dirs.begin(), dirs.end()), dirs.end()) << "ranks share a swap dir";
    }
  }
  std::filesystem::remove_all(nvme_dir());
}

// A failed read of rank 1's shard (its peers wait in that block's gather) ends the job at once with
// a line naming the rank and the block; not the world's 60 s timeout.
TEST_F(GatheredParamsTest, FailedReadOnOneRankEndsTheJob) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string dir = nvme_dir() + "_fail";
  EXPECT_EXIT(
      {
        ThreadCommunicator::run(2, [&](Communicator& comm) {
          // Rank 1's reads fail from its second forward on.
          CountingReads reads(comm.rank() == 1 ? 7 : 1 << 30);
          GatheredParams::Options o;
          o.nvme_path = dir;
          o.fault_hook = &reads;
          auto params = GatheredParams::create(layout_, comm, init_, o);
          if (!params.ok()) std::_Exit(3);
          model::Transformer rank_model(config_);
          std::vector<int32_t> tokens = {3, 14, 15, 92};
          generate(rank_model, **params, tokens, sampled_);
        });
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(1),
      "\\[rank 1\\] error: reading its shard of block [0-9] from nvme");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace zero::runtime
