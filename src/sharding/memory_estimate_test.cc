// Tests for the DeepSpeed memory estimators: the T0_3B tables of the HF DeepSpeed docs (bytes and
// printed text), ZeRO-2 numbers from reference/deepspeed-zero.md §4.3, and multi-node cases whose
// expected bytes come from DeepSpeed's Python formulas run under CPython.
#include "sharding/memory_estimate.h"

#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace zero::sharding {
namespace {

// bigscience/T0_3B via AutoModel: Ψ and L from reference/deepspeed-zero.md §4.3.
constexpr int64_t kT0Params = 2'783'959'040;
constexpr int64_t kT0Layer = 65'798'144;

EstimateSetup t0_setup(int64_t gpus) {
  EstimateSetup s;
  s.total_params = kT0Params;
  s.largest_layer_params = kT0Layer;
  s.num_gpus_per_node = gpus;
  return s;
}

std::vector<std::pair<int64_t, int64_t>> cpu_gpu(const std::vector<EstimateRow>& rows) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const EstimateRow& r : rows) out.emplace_back(r.cpu_bytes, r.gpu_bytes);
  return out;
}

TEST(MemoryEstimate, T0_3B_Stage3OneGpuBytes) {
  auto rows = estimate_all_rows(t0_setup(1), 3);
  std::vector<std::pair<int64_t, int64_t>> want = {
      {75'166'894'080, 263'192'576},   {75'166'894'080, 263'192'576},
      {66'815'016'960, 5'831'110'656}, {66'815'016'960, 5'831'110'656},
      {394'788'864, 50'374'455'296},   {16'703'754'240, 50'374'455'296}};
  EXPECT_EQ(cpu_gpu(rows), want);
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_TRUE(rows[0].offload_param && rows[0].offload_optimizer && rows[0].zero_init);
  EXPECT_TRUE(!rows[3].offload_param && rows[3].offload_optimizer && !rows[3].zero_init);
  EXPECT_TRUE(!rows[4].offload_param && !rows[4].offload_optimizer && rows[4].zero_init);
}

TEST(MemoryEstimate, T0_3B_Stage3TwoGpuBytes) {
  auto rows = estimate_all_rows(t0_setup(2), 3);
  std::vector<std::pair<int64_t, int64_t>> want = {
      {75'166'894'080, 263'192'576},   {75'166'894'080, 263'192'576},
      {66'815'016'960, 3'047'151'616}, {66'815'016'960, 3'047'151'616},
      {789'577'728, 25'318'823'936},   {33'407'508'480, 25'318'823'936}};
  EXPECT_EQ(cpu_gpu(rows), want);
}

TEST(MemoryEstimate, T0_3B_Stage3TextMatchesDeepSpeed) {
  EstimateSetup s = t0_setup(1);
  EXPECT_EQ(format_estimate_table(s, 3, estimate_all_rows(s, 3)),
            "Estimated memory needed for params, optim states and gradients for a:\n"
            "HW: Setup with 1 node, 1 GPU per node.\n"
            "SW: Model with 2783M total params, 65M largest layer params.\n"
            "  per CPU  |  per GPU |   Options\n"
            "   70.00GB |   0.25GB | offload_param=cpu , offload_optimizer=cpu , zero_init=1\n"
            "   70.00GB |   0.25GB | offload_param=cpu , offload_optimizer=cpu , zero_init=0\n"
            "   62.23GB |   5.43GB | offload_param=none, offload_optimizer=cpu , zero_init=1\n"
            "   62.23GB |   5.43GB | offload_param=none, offload_optimizer=cpu , zero_init=0\n"
            "    0.37GB |  46.91GB | offload_param=none, offload_optimizer=none, zero_init=1\n"
            "   15.56GB |  46.91GB | offload_param=none, offload_optimizer=none, zero_init=0\n");
  s = t0_setup(2);
  EXPECT_EQ(format_estimate_table(s, 3, estimate_all_rows(s, 3)),
            "Estimated memory needed for params, optim states and gradients for a:\n"
            "HW: Setup with 1 node, 2 GPUs per node.\n"
            "SW: Model with 2783M total params, 65M largest layer params.\n"
            "  per CPU  |  per GPU |   Options\n"
            "   70.00GB |   0.25GB | offload_param=cpu , offload_optimizer=cpu , zero_init=1\n"
            "   70.00GB |   0.25GB | offload_param=cpu , offload_optimizer=cpu , zero_init=0\n"
            "   62.23GB |   2.84GB | offload_param=none, offload_optimizer=cpu , zero_init=1\n"
            "   62.23GB |   2.84GB | offload_param=none, offload_optimizer=cpu , zero_init=0\n"
            "    0.74GB |  23.58GB | offload_param=none, offload_optimizer=none, zero_init=1\n"
            "   31.11GB |  23.58GB | offload_param=none, offload_optimizer=none, zero_init=0\n");
}

TEST(MemoryEstimate, T0_3B_Stage2) {
  // reference §4.3: 1 GPU -> 62.23 / 5.19 and 15.56 / 51.86; 8 GPUs -> 124.45 / 5.19, 124.45
  // / 11.02.
  EstimateSetup s = t0_setup(1);
  EXPECT_EQ(format_estimate_table(s, 2, estimate_all_rows(s, 2)),
            "Estimated memory needed for params, optim states and gradients for a:\n"
            "HW: Setup with 1 node, 1 GPU per node.\n"
            "SW: Model with 2783M total params.\n"
            "  per CPU  |  per GPU |   Options\n"
            "   62.23GB |   5.19GB | offload_optimizer=cpu \n"
            "   15.56GB |  51.86GB | offload_optimizer=none\n");
  s = t0_setup(8);
  auto rows = estimate_all_rows(s, 2);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].gpu_bytes, 2 * kT0Params);
  EXPECT_EQ(rows[1].gpu_bytes, 2 * kT0Params + 18 * kT0Params / 8);
  EXPECT_NE(format_estimate_table(s, 2, rows).find(" 124.45GB |   5.19GB | offload_optimizer=cpu"),
            std::string::npos);
  EXPECT_NE(format_estimate_table(s, 2, rows).find(" 124.45GB |  11.02GB | offload_optimizer=none"),
            std::string::npos);
}

struct PythonCase {
  EstimateSetup setup;
  std::vector<std::pair<int64_t, int64_t>> zero2;
  std::vector<std::pair<int64_t, int64_t>> zero3;
};

// Expected values: DeepSpeed's estimate_zero{2,3}_model_states_mem_needs run in CPython 3.
TEST(MemoryEstimate, MultiNodeMatchesPythonArithmetic) {
  std::vector<PythonCase> cases = {
      {{2783959040, 65798144, 3, 3, 1.7},
       {{170378293248, 5567918080}, {56792764416, 11135836160}},
       {{28396382208, 263192576},
        {56792764416, 263192576},
        {25241228629, 881850140},
        {56792764416, 881850140},
        {1342282137, 5831110656},
        {56792764416, 5831110656}}},
      {{123456789012, 987654321, 5, 7, 1.3},
       {{22469135600184, 246913578024}, {3209876514312, 310405640944}},
       {{412698408982, 3950617284},
        {3209876514312, 3950617284},
        {366843030207, 11005290941},
        {3209876514312, 11005290941},
        {25679012346, 67442680204},
        {3209876514312, 67442680204}}},
      {{1000000007, 3, 1, 3, 1.1},  // max(4·gpus, 18/nodes) picks the float branch
       {{17600000123, 2000000014}, {4400000030, 8000000056}},
       {{6600000046, 12},
        {6600000046, 12},
        {5866666707, 666666683},
        {5866666707, 666666683},
        {13, 6000000054},
        {4400000030, 6000000054}}},
  };
  for (const PythonCase& c : cases) {
    ASSERT_TRUE(validate_estimate_setup(c.setup, 3).ok());
    EXPECT_EQ(cpu_gpu(estimate_all_rows(c.setup, 2)), c.zero2) << c.setup.total_params;
    EXPECT_EQ(cpu_gpu(estimate_all_rows(c.setup, 3)), c.zero3) << c.setup.total_params;
  }
  EstimateSetup s = cases[1].setup;
  EXPECT_NE(format_estimate_table(s, 3, estimate_all_rows(s, 3))
                .find("HW: Setup with 7 nodes, 5 GPUs per node."),
            std::string::npos);
}

TEST(MemoryEstimate, Validation) {
  EstimateSetup s = t0_setup(1);
  EXPECT_TRUE(validate_estimate_setup(s, 2).ok());
  EXPECT_FALSE(validate_estimate_setup(s, 1).ok());
  s.largest_layer_params = 0;
  EXPECT_TRUE(validate_estimate_setup(s, 2).ok());  // L unused for stage 2
  EXPECT_FALSE(validate_estimate_setup(s, 3).ok());
  s.largest_layer_params = kT0Params + 1;
  EXPECT_FALSE(validate_estimate_setup(s, 3).ok());
  s = t0_setup(0);
  EXPECT_FALSE(validate_estimate_setup(s, 2).ok());
  s = t0_setup(1);
  s.num_nodes = 0;
  EXPECT_FALSE(validate_estimate_setup(s, 2).ok());
  s = t0_setup(1);
  s.additional_buffer_factor = 0;
  EXPECT_FALSE(validate_estimate_setup(s, 2).ok());
  s = t0_setup(1);
  s.total_params = kMaxEstimateParams + 1;
  EXPECT_FALSE(validate_estimate_setup(s, 2).ok());
  s.total_params = kMaxEstimateParams / 10;
  s.num_gpus_per_node = 1000;  // 4·gpus·Ψ past 2^53
  auto status = validate_estimate_setup(s, 2);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("2^53"), std::string::npos);
}

TEST(MemoryEstimate, JsonRows) {
  auto rows = estimate_all_rows(t0_setup(1), 3);
  EXPECT_EQ(estimate_row_to_json(rows[4]).dump(),
            R"({"stage":3,"offload_optimizer":"none","offload_param":"none","zero_init":true,)"
            R"("cpu_bytes":394788864,"gpu_bytes":50374455296})");
  auto rows2 = estimate_all_rows(t0_setup(1), 2);
  EXPECT_EQ(
      estimate_row_to_json(rows2[0]).dump(),
      R"({"stage":2,"offload_optimizer":"cpu","cpu_bytes":66815016960,"gpu_bytes":5567918080})");
}

}  // namespace
}  // namespace zero::sharding
