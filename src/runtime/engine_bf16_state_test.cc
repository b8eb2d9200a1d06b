// The engine with a bf16 optimizer state (DeepSpeed 0.19's bf16.bf16_master_weights_and_grads and
// bf16_optimizer_states) on the golden gpt2_tiny bf16 run: every stage / offload placement gives
// one curve bitwise (the same kernel over the same bf16 values), the state holds bf16 values in
// 6 bytes per element (10 with fp32 moments), the curve stays within a stated bound of the fp32-
// state curve, a restore resumes bitwise, and what DeepSpeed refuses is refused naming the key.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/storage.h"
#include "model/hf_checkpoint.h"
#include "model/model_config.h"
#include "optim/optimizer_spec.h"
#include "runtime/engine.h"
#include "runtime/golden_steps_testing.h"

namespace zero::runtime {
namespace {

const std::string kGolden = std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/golden/";
constexpr StateDtypes kBf16State{DType::kBF16, DType::kBF16};
constexpr StateDtypes kBf16Master{DType::kBF16, DType::kF32};

struct RunSetup {
  int stage = 1;
  OffloadOptions offload;
  StateDtypes state;
};

StatusOr<std::unique_ptr<Engine>> make_engine(const RunSetup& s,
                                              std::unique_ptr<model::HfWeightReader>& reader) {
  EngineOptions o;
  o.model_config = *model::load_model_config(kGolden + "gpt2_tiny");
  o.dtype = DType::kBF16;
  o.state_dtypes = s.state;
  o.optimizer = *optim::optimizer_spec_from_json(
      "AdamW", {{"lr", 3e-3}, {"betas", {0.9, 0.999}}, {"eps", 1e-8}, {"weight_decay", 0.01}});
  o.schedule = optim::LrSchedule::constant(3e-3);
  o.gradient_clipping = 1.0;
  o.zero.stage = s.stage;
  o.zero.param_persistence_threshold_numel = 0;  // stage 3 gathers every unit
  o.offload = s.offload;
  o.check_memory = false;
  model::ModelLayout layout(o.model_config);
  ZERO_ASSIGN_OR_RETURN(
      reader, model::HfWeightReader::open(*default_storage(), kGolden + "gpt2_tiny", layout));
  model::HfWeightReader* r = reader.get();
  return Engine::create(std::move(o), [r](int u, int64_t b, int64_t e, float* dst) {
    return r->read_unit_range(u, b, e, dst);
  });
}

// Steps [first, first + count) of the golden token stream; their losses (no step skipped).
std::vector<double> train(Engine& e, int first, int count) {
  std::vector<double> losses;
  for (const StepResult& r : train_golden_steps(e, first, count)) {
    EXPECT_FALSE(r.skipped);
    losses.push_back(r.loss);
  }
  return losses;
}

struct Trajectory {
  std::vector<double> losses;
  std::vector<std::vector<float>> state;  // per unit: master | exp_avg | exp_avg_sq (fp32)
  sharding::MemoryAccounting memory;
};

std::vector<std::vector<float>> read_state(const Engine& e) {
  std::vector<std::vector<float>> out;
  for (int u = 0; u < e.layout().num_units(); ++u) {
    const int64_t n = e.partition_numel(u);
    out.emplace_back(static_cast<size_t>(3 * n));
    float* p = out.back().data();
    EXPECT_TRUE(e.read_partition_state(u, p, p + n, p + 2 * n).ok());
  }
  return out;
}

Trajectory run(const RunSetup& s, int steps) {
  Trajectory out;
  std::unique_ptr<model::HfWeightReader> reader;
  auto engine = make_engine(s, reader);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  if (!engine.ok()) return out;
  out.losses = train(**engine, 0, steps);
  out.state = read_state(**engine);
  out.memory = (*engine)->memory();
  return out;
}

std::filesystem::path temp_dir(const std::string& tag) {
  auto p = std::filesystem::temp_directory_path() /
           ("zero_bf16_state_" + std::to_string(::getpid()) + "_" + tag);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

OffloadOptions offload_to(OptimizerOffload where, const std::filesystem::path& dir = {}) {
  OffloadOptions off;
  off.optimizer = where;
  off.nvme_path = (dir / "swap").string();
  return off;
}

// Stages 1-3, in memory, offloaded to the CPU Adam, and in NVMe swap files at stage 3: one curve,
// bit for bit, and one final state; every value of it is a bf16 value.
TEST(Bf16State, EveryStageAndPlacementIsOneCurve) {
  const auto nvme_dir = temp_dir("placements");
  const Trajectory want = run({1, {}, kBf16State}, 12);
  ASSERT_EQ(want.losses.size(), 12u);
  for (const auto& unit : want.state) {
    for (float x : unit) ASSERT_EQ(x, round_to_bf16(x));
  }
  struct Variant {
    int stage;
    OffloadOptions offload;
  };
  for (const Variant& v :
       {Variant{2, {}}, Variant{3, {}}, Variant{1, offload_to(OptimizerOffload::kCpu)},
        Variant{2, offload_to(OptimizerOffload::kCpu)},
        Variant{3, offload_to(OptimizerOffload::kCpu)},
        Variant{3, offload_to(OptimizerOffload::kNvme, nvme_dir)}}) {
    SCOPED_TRACE(::testing::Message()
                 << "stage " << v.stage << " offload " << static_cast<int>(v.offload.optimizer));
    const Trajectory got = run({v.stage, v.offload, kBf16State}, 12);
    EXPECT_EQ(got.losses, want.losses);
    EXPECT_EQ(got.state, want.state);
  }
  std::filesystem::remove_all(nvme_dir);
}

// 6 bytes per element of the partition (2 master + 2 + 2 moments) instead of 12, plus one fp32
// partition of scratch to install the master weights from; 10 with fp32 moments.
TEST(Bf16State, StateBytesPerElement) {
  const OffloadOptions cpu = offload_to(OptimizerOffload::kCpu);
  const Trajectory fp32 = run({2, cpu, {}}, 1);
  const Trajectory bf16 = run({2, cpu, kBf16State}, 1);
  const Trajectory mixed = run({2, cpu, kBf16Master}, 1);
  int64_t numel = 0;
  size_t largest = 0;
  for (const auto& unit : fp32.state) numel += static_cast<int64_t>(unit.size() / 3);
  for (const auto& unit : fp32.state) largest = std::max(largest, unit.size() / 3);
  const auto scratch = static_cast<int64_t>(4 * largest);
  EXPECT_EQ(fp32.memory.master_bytes + fp32.memory.optimizer_state_bytes, 12 * numel);
  EXPECT_EQ(bf16.memory.master_bytes, 2 * numel + scratch);
  EXPECT_EQ(bf16.memory.optimizer_state_bytes, 4 * numel);
  EXPECT_EQ(mixed.memory.master_bytes, 2 * numel + scratch);
  EXPECT_EQ(mixed.memory.optimizer_state_bytes, 8 * numel);
}

// The bf16-state curve against the fp32-state curve of the same bf16 model, 30 steps at lr 3e-3:
// a bf16 master rounds every update to its 8-bit mantissa (updates below half an ulp are lost), so
// the bf16-state run learns a little slower and the curves part steadily: measured (printed below)
// 0.1% of the loss at step 11, 0.4% at step 20, at most 1.05% (step 29), the same with bf16 and
// fp32 moments (the master's rounding dominates). The bound is 2%; both still learn.
TEST(Bf16State, FollowsTheFp32StateCurve) {
  const OffloadOptions cpu = offload_to(OptimizerOffload::kCpu);
  const Trajectory fp32 = run({2, cpu, {}}, 30);
  for (const StateDtypes& dtypes : {kBf16State, kBf16Master}) {
    const Trajectory got = run({2, cpu, dtypes}, 30);
    ASSERT_EQ(got.losses.size(), fp32.losses.size());
    double worst = 0;
    for (size_t s = 0; s < fp32.losses.size(); ++s) {
      const double rel = std::abs(got.losses[s] - fp32.losses[s]) / fp32.losses[s];
      worst = std::max(worst, rel);
      EXPECT_LE(rel, 2e-2) << "step " << s + 1;
    }
    EXPECT_LT(got.losses.back(), got.losses.front() - 0.5);
    std::printf("moments %s: max |loss - fp32-state loss| / loss over 30 steps %.3g\n",
                std::string(dtype_name(dtypes.moments)).c_str(), worst);
  }
}

// Save after 4 steps (the fp32 values a checkpoint holds: read_partition_state widens the bf16
// state), restore into a fresh engine, 4 more steps: bitwise the 8 straight steps.
TEST(Bf16State, RestoreResumesBitwise) {
  for (const RunSetup& s :
       {RunSetup{2, offload_to(OptimizerOffload::kCpu), kBf16State}, RunSetup{3, {}, kBf16State},
        RunSetup{1, offload_to(OptimizerOffload::kCpu), kBf16Master}}) {
    SCOPED_TRACE(::testing::Message() << "stage " << s.stage);
    const Trajectory want = run(s, 8);
    std::unique_ptr<model::HfWeightReader> r1, r2;
    auto first = make_engine(s, r1);
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    EXPECT_EQ((*first)->master(0), nullptr);  // a bf16 master: read through read_partition_state
    std::vector<double> losses = train(**first, 0, 4);
    const std::vector<std::vector<float>> saved = read_state(**first);
    Engine::RestoreState rs;
    rs.global_step = (*first)->global_step();
    rs.optimizer_updates = (*first)->optimizer_updates();
    rs.schedule_state = (*first)->schedule().state();
    rs.loss_scaler_state = (*first)->loss_scaler().state();
    rs.read_partition = [&saved](int u, int64_t b, int64_t e, float* m, float* ea, float* eas) {
      const size_t n = static_cast<size_t>(e - b);
      const float* p = saved[static_cast<size_t>(u)].data();
      std::copy(p, p + n, m);
      std::copy(p + n, p + 2 * n, ea);
      std::copy(p + 2 * n, p + 3 * n, eas);
      return ok_status();
    };
    first->reset();
    auto second = make_engine(s, r2);
    ASSERT_TRUE(second.ok()) << second.status().to_string();
    ASSERT_TRUE((*second)->restore(rs).ok());
    for (double l : train(**second, 4, 4)) losses.push_back(l);
    EXPECT_EQ(losses, want.losses);
    EXPECT_EQ(read_state(**second), want.state);
  }
}

// DeepSpeed's refusals reach Engine::create (config::apply_zero_rules) naming the key.
TEST(Bf16State, RefusedWhereDeepSpeedRefusesIt) {
  std::unique_ptr<model::HfWeightReader> reader;
  auto stage0 = make_engine({0, {}, kBf16State}, reader);
  ASSERT_FALSE(stage0.ok());
  EXPECT_NE(stage0.status().message().find("bf16.bf16_master_weights_and_grads: only supported "
                                           "with ZeRO stage 1, 2 or 3"),
            std::string::npos)
      << stage0.status().to_string();
  auto fp32_moments = make_engine({2, {}, kBf16Master}, reader);
  ASSERT_FALSE(fp32_moments.ok());
  EXPECT_NE(fp32_moments.status().message().find("need ZeRO-Offload"), std::string::npos)
      << fp32_moments.status().to_string();
}

}  // namespace
}  // namespace zero::runtime
