// HF Trainer's schedules (--lr_scheduler_type without a scheduler block), update by update,
// against tests/fixtures/golden/hf_lr_schedules.json (tools/golden/hf_lr_schedules.py: the
// formulas of transformers' get_scheduler driven by torch's LambdaLR), plus hand-computed values at
// the warmup boundaries, kwargs errors and state save / restore.
#include "optim/hf_lr_schedule.h"

#include <cmath>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "optim/lr_schedule.h"

namespace zero::optim {
namespace {

using nlohmann::json;

constexpr double kLr = 1e-3;

LrSchedule make(const std::string& type, const json& kwargs, int64_t warmup, int64_t total,
                double lr = kLr) {
  auto s = LrSchedule::from_hf_flags(type, kwargs.empty() ? "" : kwargs.dump(), warmup, total, lr);
  EXPECT_TRUE(s.ok()) << type << ": " << s.status().to_string();
  return s.ok() ? *s : LrSchedule::constant(-1);
}

std::string error_of(const std::string& type, const std::string& kwargs, int64_t warmup = 0,
                     int64_t total = 10, double lr = kLr) {
  auto s = LrSchedule::from_hf_flags(type, kwargs, warmup, total, lr);
  return s.ok() ? "ok" : s.status().message();
}

TEST(HfLrSchedule, MatchesTorchLambdaLrGolden) {
  std::ifstream in(std::string(ZERO_SOURCE_DIR) + "/tests/fixtures/golden/hf_lr_schedules.json");
  ASSERT_TRUE(in.good());
  const json golden = json::parse(in);
  ASSERT_EQ(golden["lr"].get<double>(), kLr);
  ASSERT_GE(golden["cases"].size(), 18u);
  for (const json& c : golden["cases"]) {
    const std::string type = c["type"].get<std::string>();
    SCOPED_TRACE(type + " " + c["kwargs"].dump() + " warmup " + c["warmup"].dump() + " total " +
                 c["total"].dump());
    const LrSchedule s =
        make(type, c["kwargs"], c["warmup"].get<int64_t>(), c["total"].get<int64_t>());
    EXPECT_EQ(s.type_name(), type);
    const std::vector<double> want = c["lr_by_update"].get<std::vector<double>>();
    for (size_t i = 0; i < want.size(); ++i) {
      const int64_t update = static_cast<int64_t>(i) + 1;
      EXPECT_NEAR(s.lr_at(update), want[i], 1e-15 * kLr) << "update " << update;
    }
  }
}

// Hand-computed from HF's formulas, lambda(s) at scheduler step s = update - 1.
TEST(HfLrSchedule, LinearWithoutWarmupStartsAtTheFullLr) {
  // DeepSpeed's WarmupDecayLR (the old mapping) ran updates 1 and 2 at lr 0.
  const LrSchedule s = make("linear", {}, 0, 4);
  EXPECT_DOUBLE_EQ(s.lr_at(1), kLr);         // (4 - 0) / 4
  EXPECT_DOUBLE_EQ(s.lr_at(2), 0.75 * kLr);  // (4 - 1) / 4
  EXPECT_DOUBLE_EQ(s.lr_at(4), 0.25 * kLr);
  EXPECT_DOUBLE_EQ(s.lr_at(5), 0.0);  // past the end: max(0, ...)
}

TEST(HfLrSchedule, WarmupBoundaries) {
  // warmup 4, total 8: update 1 runs at 0, update 4 at 3/4, update 5 (step 4) at the peak.
  const LrSchedule lin = make("linear", {}, 4, 8);
  EXPECT_DOUBLE_EQ(lin.lr_at(1), 0.0);
  EXPECT_DOUBLE_EQ(lin.lr_at(4), 0.75 * kLr);
  EXPECT_DOUBLE_EQ(lin.lr_at(5), kLr);         // (8 - 4) / (8 - 4)
  EXPECT_DOUBLE_EQ(lin.lr_at(6), 0.75 * kLr);  // (8 - 5) / 4
  const LrSchedule cos = make("cosine", {}, 4, 8);
  EXPECT_DOUBLE_EQ(cos.lr_at(5), kLr);
  EXPECT_NEAR(cos.lr_at(7), 0.5 * kLr, 1e-18);  // progress 1/2: 0.5 * (1 + cos(pi / 2))
  EXPECT_NEAR(cos.lr_at(9), 0.0, 1e-18);        // progress 1: 0.5 * (1 + cos(pi))
  const LrSchedule cww = make("constant_with_warmup", {}, 4, 8);
  EXPECT_DOUBLE_EQ(cww.lr_at(3), 0.5 * kLr);
  EXPECT_DOUBLE_EQ(cww.lr_at(5), kLr);
  EXPECT_DOUBLE_EQ(cww.lr_at(100), kLr);
}

TEST(HfLrSchedule, RestartsPolynomialInverseSqrt) {
  // cosine_with_restarts, 2 cycles over 8 decay steps: restarts at step 4 (update 5).
  const LrSchedule r = make("cosine_with_restarts", {{"num_cycles", 2}}, 0, 8);
  EXPECT_DOUBLE_EQ(r.lr_at(1), kLr);
  EXPECT_NEAR(r.lr_at(3), 0.5 * kLr, 1e-18);  // (2 * 2/8) % 1 = 0.5
  EXPECT_DOUBLE_EQ(r.lr_at(5), kLr);          // (2 * 4/8) % 1 = 0
  EXPECT_DOUBLE_EQ(r.lr_at(9), 0.0);          // progress >= 1
  // polynomial power 1 from 1e-3 to lr_end 1e-7 over 10 steps, then lr_end.
  const LrSchedule p = make("polynomial", {}, 0, 10);
  EXPECT_DOUBLE_EQ(p.lr_at(1), kLr);
  EXPECT_NEAR(p.lr_at(6), 0.5 * (kLr - 1e-7) + 1e-7, 1e-18);
  EXPECT_NEAR(p.lr_at(11), 1e-7, 1e-20);  // step 10 == total: pct 0
  EXPECT_NEAR(p.lr_at(50), 1e-7, 1e-20);
  // inverse_sqrt: timescale = warmup (4): lambda(s) = 1 / sqrt(s / 4) after the warmup.
  const LrSchedule i = make("inverse_sqrt", {}, 4, 0);
  EXPECT_DOUBLE_EQ(i.lr_at(5), kLr);
  EXPECT_DOUBLE_EQ(i.lr_at(17), 0.5 * kLr);  // step 16
  // no warmup: timescale 10000, shift 10000: step 20000 -> 1/sqrt(3), step 30000 -> 1/2
  const LrSchedule i0 = make("inverse_sqrt", {}, 0, 0);
  EXPECT_DOUBLE_EQ(i0.lr_at(1), kLr);
  EXPECT_NEAR(i0.lr_at(20001), kLr / std::sqrt(3.0), 1e-18);
  EXPECT_DOUBLE_EQ(i0.lr_at(30001), 0.5 * kLr);
}

TEST(HfLrSchedule, WarmupStableDecayPhases) {
  // warmup 2, total 10, decay 4 (linear) -> stable 4 (steps 2..5), decay steps 6..9, then 0.
  const LrSchedule s =
      make("warmup_stable_decay", {{"num_decay_steps", 4}, {"decay_type", "linear"}}, 2, 10);
  EXPECT_DOUBLE_EQ(s.lr_at(2), 0.5 * kLr);
  EXPECT_DOUBLE_EQ(s.lr_at(3), kLr);
  EXPECT_DOUBLE_EQ(s.lr_at(6), kLr);
  EXPECT_DOUBLE_EQ(s.lr_at(7), kLr);  // step 6: decay progress 0
  EXPECT_DOUBLE_EQ(s.lr_at(9), 0.5 * kLr);
  EXPECT_DOUBLE_EQ(s.lr_at(11), 0.0);  // min_lr_ratio
}

TEST(HfLrSchedule, ConstantIsTheOptimizerLr) {
  const LrSchedule s = make("constant", {}, 5, 10);
  EXPECT_EQ(s.type_name(), "constant");
  EXPECT_DOUBLE_EQ(s.lr_at(1), kLr);
  EXPECT_DOUBLE_EQ(s.lr_at(7), kLr);
}

TEST(HfLrSchedule, KwargsAsHfParsesThem) {
  // TrainingArguments turns digit strings into numbers.
  const LrSchedule s = make("cosine_with_restarts", {{"num_cycles", "2"}}, 0, 8);
  EXPECT_DOUBLE_EQ(s.lr_at(5), kLr);
  EXPECT_EQ(error_of("cosine", "{\"num_cycle\": 2}"),
            "--lr_scheduler_kwargs: num_cycle is not an argument of cosine (known: num_cycles)");
  EXPECT_NE(error_of("linear", "{\"num_cycles\": 2}").find("linear takes no arguments"),
            std::string::npos);
  EXPECT_NE(error_of("constant", "{\"x\": 1}").find("constant takes no arguments"),
            std::string::npos);
  EXPECT_NE(error_of("inverse_sqrt", "{\"timescale\": 7}").find("takes no arguments"),
            std::string::npos);
  EXPECT_NE(error_of("cosine", "[1]").find("expected a JSON object"), std::string::npos);
  EXPECT_NE(error_of("cosine", "{bad").find("expected a JSON object"), std::string::npos);
  EXPECT_NE(error_of("cosine", "{\"num_cycles\": \"x\"}").find("must be a finite number"),
            std::string::npos);
  EXPECT_NE(error_of("cosine", "{\"last_epoch\": 3}").find("resume from a checkpoint"),
            std::string::npos);
}

TEST(HfLrSchedule, RefusesWhatHfRefuses) {
  EXPECT_NE(error_of("warmup_stable_decay", "").find("num_decay_steps"), std::string::npos);
  EXPECT_NE(error_of("warmup_stable_decay", "{\"num_decay_steps\": 8}", 4, 10).find("exceed"),
            std::string::npos);
  EXPECT_NE(error_of("warmup_stable_decay", "{\"num_decay_steps\": 2, \"decay_type\": \"exp\"}")
                .find("\"linear\", \"cosine\" or \"1-sqrt\""),
            std::string::npos);
  EXPECT_NE(
      error_of("polynomial", "{\"lr_end\": 0.01}").find("must be smaller than the initial lr"),
      std::string::npos);
  EXPECT_NE(error_of("cosine_with_min_lr", "").find("exactly one of min_lr and min_lr_rate"),
            std::string::npos);
  EXPECT_NE(error_of("Cosine", "").find("expected linear, cosine"), std::string::npos);
  auto plateau = LrSchedule::from_hf_flags("reduce_lr_on_plateau", "", 0, 10, kLr);
  EXPECT_EQ(plateau.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(error_of("linear", "", 0, 0).find("needs the number of training steps"),
            std::string::npos);
}

TEST(HfLrSchedule, StateRoundTripsAndNamesTheOldMapping) {
  LrSchedule a = make("cosine", {}, 2, 10);
  for (int i = 0; i < 5; ++i) a.on_successful_update();
  EXPECT_EQ(a.state()["type"], "cosine");
  LrSchedule b = make("cosine", {}, 2, 10);
  ASSERT_TRUE(b.restore(a.state()).ok());
  EXPECT_EQ(b.completed_updates(), 5);
  EXPECT_DOUBLE_EQ(b.next_lr(), a.next_lr());
  // A checkpoint from before HF's formulas: --lr_scheduler_type linear was WarmupDecayLR.
  const Status s = b.restore({{"type", "WarmupDecayLR"}, {"last_batch_iteration", 3}});
  EXPECT_NE(s.message().find("write a \"scheduler\" block of type WarmupDecayLR"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(b.restore({{"type", "linear"}, {"last_batch_iteration", 3}}).ok());
}

}  // namespace
}  // namespace zero::optim
