// Tests for the throughput model against hand-computed values: ring / tree / staged collective
// formulas, the two-level hierarchy, each stage's wire bytes, optimizer sharding, oversubscription
// and the overlap caps.
#include "sharding/throughput_model.h"

#include <gtest/gtest.h>

namespace zero::sharding {
namespace {

Link custom(double bytes_per_s, double latency_s, LinkAlgorithm algorithm = LinkAlgorithm::kRing) {
  return Link{"custom", bytes_per_s, latency_s, algorithm, false, false, {}};
}

Topology one_node(int64_t gpus, const Link& link) { return Topology{gpus, 1, link, link}; }

TEST(ThroughputModel, RingAllReduceOnNvlink) {
  Topology t = one_node(8, *link_preset("nvlink"));
  // 2·7/8·1e9 / 450e9 + 2·7·2 µs
  EXPECT_NEAR(collective_seconds(CollectiveKind::kAllReduce, 1e9, 1, t),
              2.0 * 7 / 8 * 1e9 / 450e9 + 14 * 2e-6, 1e-12);
}

TEST(ThroughputModel, RingReduceScatterAndAllGatherPayLatencyPerCall) {
  Topology t = one_node(4, custom(1e9, 1e-3));
  // 3/4·4e9/1e9 = 3 s, + 2 calls × 3 steps × 1 ms
  EXPECT_DOUBLE_EQ(collective_seconds(CollectiveKind::kReduceScatter, 4e9, 2, t), 3.006);
  EXPECT_DOUBLE_EQ(collective_seconds(CollectiveKind::kAllGather, 4e9, 2, t), 3.006);
}

TEST(ThroughputModel, WorldOfOneMovesNothing) {
  Topology t = one_node(1, custom(1e9, 1e-3));
  EXPECT_EQ(collective_seconds(CollectiveKind::kAllReduce, 4e9, 3, t), 0.0);
}

TEST(ThroughputModel, HierarchyRingInNodeThenNicAcross) {
  Topology t{8, 4, custom(400e9, 0), custom(50e9, 0)};
  // RS in node 7/8·8e9/400e9 + all-reduce of the 1e9 piece across 4 nodes 2·3/4·1e9/50e9 + AG
  EXPECT_NEAR(collective_seconds(CollectiveKind::kAllReduce, 8e9, 1, t), 0.0175 + 0.03 + 0.0175,
              1e-12);
  // RS: in-node ring + the piece's ring across nodes
  EXPECT_NEAR(collective_seconds(CollectiveKind::kReduceScatter, 8e9, 1, t),
              0.0175 + 0.75 * 1e9 / 50e9, 1e-12);
}

TEST(ThroughputModel, HierarchyOfEqualLinksIsTheFlatRing) {
  Topology two_level{4, 2, custom(1e9, 0), custom(1e9, 0)};
  Topology flat = one_node(8, custom(1e9, 0));
  for (CollectiveKind kind :
       {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kAllGather}) {
    EXPECT_NEAR(collective_seconds(kind, 3e9, 1, two_level), collective_seconds(kind, 3e9, 1, flat),
                1e-12)
        << collective_kind_name(kind);
  }
  // One GPU per node: the network alone.
  Topology nodes{1, 8, custom(1e12, 0), custom(1e9, 0)};
  EXPECT_NEAR(collective_seconds(CollectiveKind::kAllReduce, 3e9, 1, nodes),
              2.0 * 7 / 8 * 3e9 / 1e9, 1e-12);
}

TEST(ThroughputModel, TreeWinsSmallMessagesAndAutoPicksIt) {
  const double ring = 2.0 * 15 / 16 * 1e3 / 1e9 + 30 * 1e-5;
  const double tree = 2.0 * 1e3 / 1e9 + 2 * 4 * 1e-5;  // ⌈log2 16⌉ = 4 levels, up and down
  EXPECT_NEAR(collective_seconds(CollectiveKind::kAllReduce, 1e3, 1,
                                 one_node(16, custom(1e9, 1e-5, LinkAlgorithm::kRing))),
              ring, 1e-15);
  EXPECT_NEAR(collective_seconds(CollectiveKind::kAllReduce, 1e3, 1,
                                 one_node(16, custom(1e9, 1e-5, LinkAlgorithm::kTree))),
              tree, 1e-15);
  EXPECT_NEAR(collective_seconds(CollectiveKind::kAllReduce, 1e3, 1,
                                 one_node(16, custom(1e9, 1e-5, LinkAlgorithm::kAuto))),
              tree, 1e-15);
  // Large message: the ring's (p−1)/p wins.
  EXPECT_NEAR(collective_seconds(CollectiveKind::kAllReduce, 1e10, 1,
                                 one_node(16, custom(1e9, 1e-5, LinkAlgorithm::kAuto))),
              2.0 * 15 / 16 * 10 + 30 * 1e-5, 1e-9);
}

TEST(ThroughputModel, StagedSharedMemoryCopiesWholeBuffers) {
  Topology t = one_node(2, custom(1e9, 1e-4, LinkAlgorithm::kStaged));
  const double b = 8 << 20;  // two 4 MiB chunks
  // copy in + 1.5·(1/2) + copy out = 2.75 copies; 2 barriers per chunk
  EXPECT_NEAR(collective_seconds(CollectiveKind::kAllReduce, b, 1, t), 2.75 * b / 1e9 + 4e-4,
              1e-12);
  // 2.5·(1/2) copies; 1 barrier per chunk
  EXPECT_NEAR(collective_seconds(CollectiveKind::kReduceScatter, b, 1, t), 1.25 * b / 1e9 + 2e-4,
              1e-12);
  // own block into the slot and the output, the peer's block out: 1.5 copies; the 4 MiB block is
  // one chunk
  EXPECT_NEAR(collective_seconds(CollectiveKind::kAllGather, b, 1, t), 1.5 * b / 1e9 + 1e-4, 1e-12);
}

TEST(ThroughputModel, PerKindCostsOverrideTheLinkForTheirCollectiveOnly) {
  Link link = custom(1e9, 1e-3);
  link.by_kind[static_cast<size_t>(CollectiveKind::kAllGather)] = LinkCost{4e9, 0};
  Topology t = one_node(4, link);
  // all_gather: 3/4·4e9 / 4e9, no latency; reduce_scatter keeps the link's 1 GB/s and 1 ms.
  EXPECT_DOUBLE_EQ(collective_seconds(CollectiveKind::kAllGather, 4e9, 2, t), 0.75);
  EXPECT_DOUBLE_EQ(collective_seconds(CollectiveKind::kReduceScatter, 4e9, 2, t), 3.006);
  // Two levels: the all-reduce's in-node all-gather takes the all_gather cost, its in-node
  // reduce-scatter the link's: RS 7/8·8e9/1e9 + AG 7/8·8e9/4e9 (8 GPUs per node, 2 nodes, no
  // latency), + the 1e9 piece's all-reduce across nodes 2·1/2·1e9/1e9.
  Link in_node = custom(1e9, 0);
  in_node.by_kind[static_cast<size_t>(CollectiveKind::kAllGather)] = LinkCost{4e9, 0};
  Topology two{8, 2, in_node, custom(1e9, 0)};
  EXPECT_NEAR(collective_seconds(CollectiveKind::kAllReduce, 8e9, 1, two), 7.0 + 1.75 + 1.0, 1e-12);
  // A bad per-kind pair is named.
  link.by_kind[static_cast<size_t>(CollectiveKind::kAllGather)] = LinkCost{0, 0};
  Topology bad = one_node(4, link);
  EXPECT_NE(
      validate_throughput_inputs(
          ThroughputInputs{.total_params = 1, .tokens_per_micro_batch = 1, .compute_s = 1}, bad)
          .message()
          .find("custom: all_gather bandwidth must be > 0"),
      std::string::npos);
}

TEST(ThroughputModel, CollectiveTermsAreTheFormulasCoefficients) {
  // Ring all-reduce over 4: 2·3/4·B bytes per bandwidth, 2·3 steps per call.
  CollectiveTerms ring =
      collective_terms(CollectiveKind::kAllReduce, 8e6, 2, 4, LinkAlgorithm::kRing);
  EXPECT_DOUBLE_EQ(ring.bytes_per_bandwidth, 12e6);
  EXPECT_DOUBLE_EQ(ring.latency_steps, 12);
  // Staged reduce-scatter of 8 MiB in one call at world 2: 2.5·1/2·B, two 4 MiB chunks.
  CollectiveTerms staged =
      collective_terms(CollectiveKind::kReduceScatter, 8 << 20, 1, 2, LinkAlgorithm::kStaged);
  EXPECT_DOUBLE_EQ(staged.bytes_per_bandwidth, 1.25 * (8 << 20));
  EXPECT_DOUBLE_EQ(staged.latency_steps, 2);
  CollectiveTerms none =
      collective_terms(CollectiveKind::kAllGather, 1e6, 1, 1, LinkAlgorithm::kRing);
  EXPECT_EQ(none.bytes_per_bandwidth, 0.0);
  EXPECT_EQ(*parse_collective_kind("reduce_scatter"), CollectiveKind::kReduceScatter);
  EXPECT_FALSE(parse_collective_kind("broadcast").has_value());
}

ThroughputInputs base_inputs(int stage) {
  ThroughputInputs in;
  in.stage = stage;
  in.total_params = 1'000'000;
  in.param_bytes = 2;
  in.grad_wire_bytes = 2;
  in.grad_accum = 2;
  in.tokens_per_micro_batch = 1024;
  in.compute_s = 1.0;
  return in;
}

TEST(ThroughputModel, WireBytesPerStageFollowDesignSection4) {
  Topology t = one_node(4, custom(1e9, 0));
  // k = 2, Ψ = 1e6 in bf16: stage 0 one all-reduce 2Ψ B; 1 RS + AG; 2 k RS + AG; 3 k (AG+AG+RS)
  const double want[] = {2e6, 4e6, 6e6, 12e6};
  for (int stage = 0; stage <= 3; ++stage) {
    ThroughputInputs in = base_inputs(stage);
    ASSERT_TRUE(validate_throughput_inputs(in, t).ok());
    EXPECT_DOUBLE_EQ(predict_step(in, t).wire_bytes, want[stage]) << "stage " << stage;
  }
  // Stage 3 keeping every unit gathered (a model under stage3_max_reuse_distance / 2): one gather
  // per step, a reduce-scatter per micro-step; keeping 4e5 of 1e6: Ψ + 0.6Ψ forward, 2·0.6Ψ
  // backward, 2Ψ reduce-scatters (×2 B).
  ThroughputInputs in = base_inputs(3);
  in.stage3_kept_numel = in.total_params;
  ThroughputPrediction kept_all = predict_step(in, t);
  EXPECT_DOUBLE_EQ(kept_all.wire_bytes, 2e6 + 4e6);
  EXPECT_EQ(kept_all.phases.size(), 2u);  // no backward gather
  in.stage3_kept_numel = 400'000;
  EXPECT_DOUBLE_EQ(predict_step(in, t).wire_bytes, 2 * (1.6e6 + 1.2e6 + 2e6));
}

TEST(ThroughputModel, StageZeroOnNvlinkByHand) {
  ThroughputInputs in = base_inputs(0);
  in.total_params = 1'000'000'000;
  in.grad_accum = 1;
  Topology t = one_node(8, *link_preset("nvlink"));
  ThroughputPrediction p = predict_step(in, t);
  const double comm = 2.0 * 7 / 8 * 2e9 / 450e9 + 14 * 2e-6;
  EXPECT_NEAR(p.comm_s, comm, 1e-12);
  EXPECT_NEAR(p.exposed_comm_s, comm, 1e-12);  // overlap_comm off
  EXPECT_NEAR(p.step_s, 1.0 + comm, 1e-12);
  EXPECT_DOUBLE_EQ(p.tokens_per_step, 8 * 1024);
  EXPECT_NEAR(p.tokens_per_s, 8 * 1024 / (1.0 + comm), 1e-6);
  EXPECT_NEAR(p.tokens_per_s_per_rank, 1024 / (1.0 + comm), 1e-6);
  EXPECT_NEAR(p.scaling_efficiency, 1.0 / (1.0 + comm), 1e-12);
  EXPECT_DOUBLE_EQ(p.model_states_bytes, 16e9);
}

TEST(ThroughputModel, OptimizerShardsAndOversubscriptionScalesCompute) {
  Topology t = one_node(4, custom(1e12, 0));
  ThroughputInputs in = base_inputs(1);
  in.optimizer_s = 0.4;
  EXPECT_NEAR(predict_step(in, t).compute_s, 0.6 + 0.1, 1e-12);
  in.stage = 0;
  EXPECT_NEAR(predict_step(in, t).compute_s, 1.0, 1e-12);
  in.oversubscription = 2;
  EXPECT_NEAR(predict_step(in, t).compute_s, 2.0, 1e-12);
}

TEST(ThroughputModel, GradientAccumulatorsShardFromStageTwo) {
  // 1 s step: 0.4 s update (sharded at stages 1-3), 0.2 s accumulators (stages 2-3), 4 ranks.
  Topology t = one_node(4, custom(1e12, 0));
  ThroughputInputs in = base_inputs(0);
  in.optimizer_s = 0.4;
  in.gradient_s = 0.2;
  const double want[] = {1.0, 0.4 + 0.1 + 0.2, 0.4 + 0.1 + 0.05, 0.4 + 0.1 + 0.05};
  for (int stage = 0; stage <= 3; ++stage) {
    in.stage = stage;
    ASSERT_TRUE(validate_throughput_inputs(in, t).ok());
    EXPECT_NEAR(predict_step(in, t).compute_s, want[stage], 1e-12) << "stage " << stage;
  }
  // The two parts cannot exceed the step.
  in.gradient_s = 0.7;
  EXPECT_NE(validate_throughput_inputs(in, t).message().find("gradient time"), std::string::npos);
  in.gradient_s = -0.1;
  EXPECT_FALSE(validate_throughput_inputs(in, t).ok());
}

TEST(ThroughputModel, OverlapHidesUpToTheComputeItOverlaps) {
  // World 2, one call per pass, α = 0: each of stage 3's phases takes 0.5·2e6/bw = 0.15 s.
  Topology t = one_node(2, custom(0.5 * 2e6 / 0.15, 0));
  ThroughputInputs in = base_inputs(3);
  in.grad_accum = 1;
  in.compute_s = 0.3;  // forward window 0.1 s, backward window 0.2 s
  ThroughputPrediction off = predict_step(in, t);
  EXPECT_NEAR(off.comm_s, 0.45, 1e-12);
  EXPECT_NEAR(off.step_s, 0.75, 1e-12);
  in.overlap_comm = true;
  ThroughputPrediction on = predict_step(in, t);
  EXPECT_NEAR(on.exposed_comm_s, 0.45 - 0.1 - 0.2, 1e-12);
  in.overlap_efficiency = 0.5;  // hides half of each: 0.075 forward, 0.15 backward
  EXPECT_NEAR(predict_step(in, t).exposed_comm_s, 0.45 - 0.075 - 0.15, 1e-12);
  // Stage 0 with k = 2 reduces during the last micro-step's backward only: 0.2 / 2 of cover.
  ThroughputInputs s0 = base_inputs(0);
  s0.compute_s = 0.3;
  s0.overlap_comm = true;
  ThroughputPrediction p0 = predict_step(s0, t);
  EXPECT_NEAR(p0.exposed_comm_s, p0.comm_s - 0.1, 1e-12);
}

TEST(ThroughputModel, CpuLinksReduceInFp32AreSlowedAndHideNothing) {
  Link shm = *link_preset("shm");
  EXPECT_TRUE(shm.cpu_bound && shm.reduces_in_fp32);
  EXPECT_EQ(shm.algorithm, LinkAlgorithm::kStaged);
  Topology t = one_node(4, shm);
  ThroughputInputs in = base_inputs(2);  // bf16 model
  in.overlap_comm = true;
  ThroughputPrediction p = predict_step(in, t);
  EXPECT_DOUBLE_EQ(p.wire_bytes, 2 * 4e6 + 2e6);  // gradients widened to fp32, gathers in bf16
  EXPECT_DOUBLE_EQ(p.exposed_comm_s, p.comm_s);
  in.oversubscription = 2;
  EXPECT_NEAR(predict_step(in, t).comm_s, 2 * p.comm_s, 1e-12);
}

TEST(ThroughputModel, WorldOneIsComputeAlone) {
  ThroughputInputs in = base_inputs(3);
  ThroughputPrediction p = predict_step(in, one_node(1, *link_preset("nvlink")));
  EXPECT_TRUE(p.phases.empty());
  EXPECT_DOUBLE_EQ(p.step_s, 1.0);
  EXPECT_DOUBLE_EQ(p.scaling_efficiency, 1.0);
}

TEST(ThroughputModel, PresetsAndValidationNameTheInput) {
  EXPECT_NEAR(link_preset("infiniband")->bandwidth_bytes_per_s, 50e9, 1);
  Status unknown = link_preset("carrier-pigeon").status();
  EXPECT_EQ(unknown.code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.message().find("nvlink, infiniband"), std::string::npos);
  EXPECT_EQ(*parse_link_algorithm("tree"), LinkAlgorithm::kTree);
  EXPECT_FALSE(parse_link_algorithm("mesh").ok());
  Topology t = one_node(2, custom(1e9, 0));
  ThroughputInputs in = base_inputs(0);
  in.optimizer_s = 2.0;
  EXPECT_NE(validate_throughput_inputs(in, t).message().find("optimizer time"), std::string::npos);
  in = base_inputs(4);
  EXPECT_NE(validate_throughput_inputs(in, t).message().find("stage"), std::string::npos);
  in = base_inputs(0);
  in.oversubscription = 0.5;
  EXPECT_NE(validate_throughput_inputs(in, t).message().find("oversubscription"),
            std::string::npos);
  t.inter_node.bandwidth_bytes_per_s = 0;
  EXPECT_NE(validate_throughput_inputs(base_inputs(0), t).message().find("bandwidth"),
            std::string::npos);
}

}  // namespace
}  // namespace zero::sharding
