// The weight stream's plan (how many slots a budget holds, the errors naming the bytes) and the
// stream itself on the CPU backend (`zero generate --device cpu --offload_param nvme`): the CPU
// model over the blocks streamed from a swap file gives the tokens and eval loss of the weights
// held whole, bitwise; so do blocks partitioned over ranks on threads and gathered per forward
// (stage-3 inference's source of the slots). The CUDA path's tests are
// emu/cuda_generate_emu_test.cc.
#include "runtime/streamed_params.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "comm/thread_communicator.h"
#include "device/stream_collectives.h"
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

TEST(WeightStreamPlan, SlotsAreWhatTheBudgetHolds) {
  const model::ModelConfig c = five_layer_llama();
  const model::ModelLayout layout(c);
  auto all = plan_weight_stream(layout, DType::kBF16, ParamOffload::kCpu, std::nullopt, 1000);
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  EXPECT_TRUE(all->streamed());
  EXPECT_EQ(all->slots, 2);  // no budget: double buffering
  EXPECT_EQ(all->block_bytes, layout.unit(layout.block_unit(0)).numel * 2);
  EXPECT_EQ(
      all->resident_bytes,
      (layout.unit(layout.embedding_unit()).numel + layout.unit(layout.final_unit()).numel) * 2);
  const int64_t fixed = all->resident_bytes + 1000;
  // Three slots' worth (and a byte short of four).
  auto three = plan_weight_stream(layout, DType::kBF16, ParamOffload::kNvme,
                                  fixed + 4 * all->block_bytes - 1, 1000);
  ASSERT_TRUE(three.ok()) << three.status().to_string();
  EXPECT_EQ(three->slots, 3);
  EXPECT_EQ(three->offload, ParamOffload::kNvme);
  EXPECT_LE(three->device_bytes(), fixed + 4 * all->block_bytes - 1);
  EXPECT_NE(three->describe(Device::kCuda).find("from nvme through 3 device slots"),
            std::string::npos)
      << three->describe(Device::kCuda);
  // Every block fits: resident, whatever offload_param says.
  auto resident = plan_weight_stream(layout, DType::kBF16, ParamOffload::kCpu,
                                     fixed + 5 * all->block_bytes, 1000);
  ASSERT_TRUE(resident.ok());
  EXPECT_FALSE(resident->streamed());
  EXPECT_EQ(resident->offload, ParamOffload::kNone);
  EXPECT_NE(resident->describe(Device::kCuda).find("resident"), std::string::npos);
}

TEST(WeightStreamPlan, TooSmallABudgetNamesTheBytes) {
  const model::ModelConfig c = five_layer_llama();
  const model::ModelLayout layout(c);
  auto probe = plan_weight_stream(layout, DType::kF32, ParamOffload::kCpu, std::nullopt, 0);
  ASSERT_TRUE(probe.ok());
  const int64_t need = probe->resident_bytes + 2 * probe->block_bytes;
  auto small = plan_weight_stream(layout, DType::kF32, ParamOffload::kCpu, need - 1, 0);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.status().code(), StatusCode::kInvalidArgument);
  const std::string m = small.status().message();
  EXPECT_NE(m.find("--max_gpu_memory " + std::to_string(need - 1)), std::string::npos) << m;
  EXPECT_NE(m.find(std::to_string(need) + " bytes needed"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_TRUE(plan_weight_stream(layout, DType::kF32, ParamOffload::kCpu, need, 0).ok());
  // Resident under a budget that holds two slots but not every block: says how to stream.
  auto none = plan_weight_stream(layout, DType::kF32, ParamOffload::kNone, need, 0);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--offload_param cpu or nvme"), std::string::npos)
      << none.status().message();
}

// One rank's plan of stage-3 inference: slots of the padded block, this rank's ShardLayout shards
// on the device only with offload none, as many slots as the per-rank budget holds (at most one
// per block), and a budget short of two slots refused naming it, the rank and the bytes.
TEST(WeightStreamPlan, PartitionedPlanIsOneRanks) {
  const model::ModelConfig c = five_layer_llama();
  const model::ModelLayout layout(c);
  for (int world : {2, 3}) {
    SCOPED_TRACE(testing::Message() << "world " << world);
    const sharding::ShardLayout shards(layout, world, world - 1);
    const int u0 = layout.block_unit(0);
    auto cpu = plan_partitioned_weights(layout, DType::kBF16, ParamOffload::kCpu, std::nullopt,
                                        1000, world, world - 1);
    ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
    EXPECT_TRUE(cpu->partitioned());
    EXPECT_EQ(cpu->slots, 2);
    EXPECT_EQ(cpu->block_bytes, shards.unit(u0).padded_numel * 2);
    EXPECT_EQ(cpu->shard_bytes, 5 * shards.unit(u0).shard_numel * 2);
    EXPECT_EQ(cpu->max_shard_bytes, shards.unit(u0).shard_numel * 2);
    EXPECT_EQ(cpu->device_bytes(), cpu->resident_bytes + 2 * cpu->block_bytes + 1000);
    const std::string line = cpu->describe(Device::kCuda);
    EXPECT_NE(line.find("rank " + std::to_string(world - 1) + " of " + std::to_string(world)),
              std::string::npos)
        << line;
    EXPECT_NE(line.find("in pinned host memory"), std::string::npos) << line;
    auto none = plan_partitioned_weights(layout, DType::kBF16, ParamOffload::kNone, std::nullopt,
                                         1000, world, world - 1);
    ASSERT_TRUE(none.ok());
    EXPECT_EQ(none->device_bytes(), cpu->device_bytes() + cpu->shard_bytes);
    // Three slots' worth (a byte short of four), then more than every block.
    const int64_t fixed = cpu->resident_bytes + 1000;
    auto three = plan_partitioned_weights(layout, DType::kBF16, ParamOffload::kNvme,
                                          fixed + 4 * cpu->block_bytes - 1, 1000, world, 0);
    ASSERT_TRUE(three.ok()) << three.status().to_string();
    EXPECT_EQ(three->slots, 3);
    EXPECT_LE(three->device_bytes(), fixed + 4 * cpu->block_bytes - 1);
    auto every = plan_partitioned_weights(layout, DType::kBF16, ParamOffload::kCpu,
                                          fixed + 9 * cpu->block_bytes, 1000, world, 0);
    ASSERT_TRUE(every.ok());
    EXPECT_EQ(every->slots, 5);
    // Two slots beside the shards kept on the device; a byte less is refused.
    const int64_t need = fixed + cpu->shard_bytes + 2 * cpu->block_bytes;
    EXPECT_TRUE(
        plan_partitioned_weights(layout, DType::kBF16, ParamOffload::kNone, need, 1000, world, 0)
            .ok());
    auto small = plan_partitioned_weights(layout, DType::kBF16, ParamOffload::kNone, need - 1, 1000,
                                          world, 1);
    ASSERT_FALSE(small.ok());
    const std::string m = small.status().message();
    EXPECT_NE(
        m.find("--max_gpu_memory " + std::to_string(need - 1) + " is too small for rank 1 of " +
               std::to_string(world) + ": " + std::to_string(need) + " bytes needed"),
        std::string::npos)
        << m;
    EXPECT_NE(m.find("--offload_param cpu or nvme keeps the shards off the device: " +
                     std::to_string(need - cpu->shard_bytes) + " bytes"),
              std::string::npos)
        << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

TEST(WeightStreamPlan, ParsesOffloadNames) {
  EXPECT_EQ(*parse_param_offload("none"), ParamOffload::kNone);
  EXPECT_EQ(*parse_param_offload("cpu"), ParamOffload::kCpu);
  EXPECT_EQ(*parse_param_offload("nvme"), ParamOffload::kNvme);
  auto bad = parse_param_offload("gpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'gpu'"), std::string::npos);
}

// On the CPU backend (the CPU model reads host views; the inline compute stream makes acquire wait
// for the block's copy): blocks from a swap file, 2 and 3 slots.
TEST(StreamedParams, CpuModelFromNvmeEqualsTheWholeWeights) {
  const model::ModelConfig c = five_layer_llama();
  const model::ModelLayout layout(c);
  const UnitInitFn init = [&layout](int u, int64_t begin, int64_t end, float* dst) {
    model::init_unit_range(layout, u, 7, begin, end, dst);
    return ok_status();
  };
  auto whole = ModelWeights::load(layout, DType::kBF16, init);
  ASSERT_TRUE(whole.ok());
  auto rest = ModelWeights::load(layout, DType::kBF16, init, [&layout](int u) {
    return u == layout.embedding_unit() || u == layout.final_unit();
  });
  ASSERT_TRUE(rest.ok());
  model::Transformer model(c);

  SamplingOptions greedy;
  greedy.temperature = 0.0;
  greedy.max_new_tokens = 5;
  std::vector<int32_t> want = {3, 14, 15, 92};
  generate(model, **whole, want, greedy);
  std::vector<MicroBatch> micro(1);
  micro[0].batch = 2;
  micro[0].seq = 5;
  for (int i = 0; i < 10; ++i) {
    micro[0].tokens.push_back((i * 31 + 7) % 256);
    micro[0].targets.push_back((i * 17 + 3) % 256);
  }
  auto want_loss = forward_loss_sum(model, **whole, micro);
  ASSERT_TRUE(want_loss.ok());

  const std::string dir = ::testing::TempDir() + "zero_streamed_params_test";
  std::filesystem::remove_all(dir);
  auto ctx = device::ExecutionContext::create_host();
  for (int slots : {2, 3}) {
    StreamedParams::Options o;
    o.offload = ParamOffload::kNvme;
    o.slots = slots;
    o.dtype = DType::kBF16;
    o.nvme_path = dir;
    auto stream = StreamedParams::create(
        layout, **rest,
        [&](int u, int64_t begin, int64_t end, void* dst) {
          return ModelWeights::fill_range(layout, u, begin, end, DType::kBF16, init, dst);
        },
        *ctx, o);
    ASSERT_TRUE(stream.ok()) << stream.status().to_string();
    EXPECT_EQ((*stream)->host_bytes(), slots * layout.unit(layout.block_unit(0)).numel * 2);
    std::vector<int32_t> got = {3, 14, 15, 92};
    generate(model, **stream, got, greedy);
    EXPECT_EQ(got, want) << slots << " slots";
    auto got_loss = forward_loss_sum(model, **stream, micro);
    ASSERT_TRUE(got_loss.ok());
    EXPECT_EQ(got_loss->loss_sum, want_loss->loss_sum);
    EXPECT_TRUE((*stream)->status().ok());
    stream->reset();
    EXPECT_TRUE(!std::filesystem::exists(dir) || std::filesystem::is_empty(dir));
  }
  std::filesystem::remove_all(dir);
}

// The slots filled by gathers instead of copies: each rank of 1-4 (3: blocks that do not divide
// into the shards, the padding gathered too) holds its shard of every block, and the CPU model
// over the gathered blocks gives the tokens and eval loss of the whole weights, bitwise, on every
// rank; a rank holds its shards alone (ShardLayout's), and each forward gathers every block once
// (2 slots: one block ahead).
TEST(StreamedParams, PartitionedBlocksGatheredOnThreadRanksAreTheWholeWeights) {
  const model::ModelConfig c = five_layer_llama();
  const model::ModelLayout layout(c);
  const UnitInitFn init = [&layout](int u, int64_t begin, int64_t end, float* dst) {
    model::init_unit_range(layout, u, 3, begin, end, dst);
    return ok_status();
  };
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    auto whole = ModelWeights::load(layout, dtype, init);
    ASSERT_TRUE(whole.ok());
    model::Transformer model(c);
    SamplingOptions sampled;
    sampled.temperature = 1.0;
    sampled.seed = 11;
    sampled.max_new_tokens = 4;
    std::vector<int32_t> want = {3, 14, 15, 92};
    generate(model, **whole, want, sampled);
    std::vector<MicroBatch> micro(1);
    micro[0].batch = 2;
    micro[0].seq = 5;
    for (int i = 0; i < 10; ++i) {
      micro[0].tokens.push_back((i * 31 + 7) % 256);
      micro[0].targets.push_back((i * 17 + 3) % 256);
    }
    auto want_loss = forward_loss_sum(model, **whole, micro);
    ASSERT_TRUE(want_loss.ok());
    for (int world : {1, 2, 3, 4}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " world " << world);
      std::mutex mu;
      std::vector<std::vector<int32_t>> got(static_cast<size_t>(world));
      ThreadCommunicator::run(world, [&](Communicator& comm) {
        auto rest = ModelWeights::load(layout, dtype, init, [&layout](int u) {
          return u == layout.embedding_unit() || u == layout.final_unit();
        });
        ASSERT_TRUE(rest.ok());
        model::Transformer rank_model(c);  // its buffers are this thread's
        // The host engine's context: the CPU model computes on this thread, the gathers start on
        // it in program order.
        auto ctx = device::ExecutionContext::create_host();
        auto gathers = device::make_stream_collectives(comm, *ctx);
        ASSERT_TRUE(gathers.ok()) << gathers.status().to_string();
        StreamedParams::Options o;
        o.offload = ParamOffload::kNone;
        o.slots = 2;
        o.dtype = dtype;
        o.gather = gathers->get();
        auto stream = StreamedParams::create(
            layout, **rest,
            [&](int u, int64_t begin, int64_t end, void* dst) {
              return ModelWeights::fill_range(layout, u, begin, end, dtype, init, dst);
            },
            *ctx, o);
        ASSERT_TRUE(stream.ok()) << stream.status().to_string();
        const sharding::ShardLayout shards(layout, world, comm.rank());
        int64_t shard_numel = 0;
        for (int l = 0; l < 5; ++l) shard_numel += shards.unit(layout.block_unit(l)).shard_numel;
        EXPECT_EQ((*stream)->shard_bytes(), shard_numel * static_cast<int64_t>(dtype_bytes(dtype)));
        std::vector<int32_t> tokens = {3, 14, 15, 92};
        generate(rank_model, **stream, tokens, sampled);
        // The window: the first forward's two blocks, then each block once per forward.
        EXPECT_EQ(((*stream)->blocks_copied() - 1) % 5, 0) << (*stream)->blocks_copied();
        auto loss = forward_loss_sum(rank_model, **stream, micro);
        ASSERT_TRUE(loss.ok());
        EXPECT_EQ(loss->loss_sum, want_loss->loss_sum);
        EXPECT_TRUE((*stream)->status().ok()) << (*stream)->status().to_string();
        std::lock_guard<std::mutex> lock(mu);
        got[static_cast<size_t>(comm.rank())] = tokens;
      });
      for (int r = 0; r < world; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], want) << "rank " << r;
    }
  }
}

}  // namespace
}  // namespace zero::runtime
