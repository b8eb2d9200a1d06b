// metrics.jsonl lines: every key of the contract, floats that read back exactly.
#include "runtime/metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace zero::runtime {
namespace {

TEST(Metrics, LineHasEveryKeyAndExactFloats) {
  StepMetrics m;
  m.step = 21;
  m.loss = 3.0371429920196533;
  m.lr = 0.1 + 0.2;  // not representable in a short decimal
  m.grad_norm = 1.0;
  m.loss_scale = 65536;
  m.skipped = false;
  m.tokens = 2048;
  m.elapsed_s = 12.5;
  nlohmann::json j = nlohmann::json::parse(metrics_json_line(m));
  EXPECT_EQ(j["step"], 21);
  EXPECT_EQ(j["loss"].get<double>(), m.loss);
  EXPECT_EQ(j["lr"].get<double>(), m.lr);
  EXPECT_TRUE(j["grad_norm"].is_number_float());
  EXPECT_TRUE(j["loss_scale"].is_number_float());
  EXPECT_EQ(j["skipped"], false);
  EXPECT_EQ(j["tokens"], 2048);
  EXPECT_EQ(j["elapsed_s"].get<double>(), 12.5);
  m.grad_norm = std::nan("");
  EXPECT_TRUE(nlohmann::json::parse(metrics_json_line(m))["grad_norm"].is_null());
  EXPECT_FALSE(j.contains("eval_loss")) << "no evaluation, no eval keys";
}

// Issue 12 item 4: an evaluation after a step adds eval_loss / eval_ppl to that step's line (one
// line per step stays true); --eval_on_start writes a step-0 line without "loss".
TEST(Metrics, EvalFieldsJoinTheStepLine) {
  StepMetrics m;
  m.step = 4;
  m.eval_loss = 2.5;
  m.eval_ppl = std::exp(2.5);
  nlohmann::json j = nlohmann::json::parse(metrics_json_line(m));
  EXPECT_EQ(j["step"], 4);
  EXPECT_EQ(j["eval_loss"].get<double>(), 2.5);
  EXPECT_EQ(j["eval_ppl"].get<double>(), std::exp(2.5));
  nlohmann::json start = nlohmann::json::parse(eval_on_start_json_line(3.0, std::exp(3.0)));
  EXPECT_EQ(start["step"], 0);
  EXPECT_EQ(start["eval_loss"].get<double>(), 3.0);
  EXPECT_FALSE(start.contains("loss"));
}

// Resume keeps the step-0 eval line of --eval_on_start (not counted as a step).
TEST(Metrics, TruncateKeepsTheEvalOnStartLine) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("zero_metrics_eval_" + std::to_string(::getpid()) + ".jsonl"))
                               .string();
  {
    std::ofstream f(path, std::ios::trunc);
    f << eval_on_start_json_line(3.0, std::exp(3.0)) << "\n";
    for (int s : {1, 2, 3}) f << "{\"step\": " << s << ", \"loss\": 1.0}\n";
  }
  auto t = truncate_metrics(path, 2);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->lines_kept, 2);
  EXPECT_EQ(t->steps_missing, 0);
  std::ifstream in(path);
  std::string line;
  std::vector<int64_t> steps;
  while (std::getline(in, line)) steps.push_back(nlohmann::json::parse(line)["step"]);
  EXPECT_EQ(steps, (std::vector<int64_t>{0, 1, 2}));
  std::filesystem::remove(path);
}

// Issue 13 item 6: resuming leaves exactly one line per step 1..N. Lines past the checkpoint go,
// a step written twice (a crashed run, then its resume) keeps the newer line, a torn last line
// goes, and steps with no line are reported rather than silently absent.
TEST(Metrics, TruncateKeepsOneLinePerStepUpToTheCheckpoint) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("zero_metrics_test_" + std::to_string(::getpid()) + ".jsonl"))
                               .string();
  {
    std::ofstream f(path, std::ios::trunc);
    for (int s : {1, 2, 3, 4, 5, 6}) f << "{\"step\": " << s << ", \"loss\": 1.0}\n";
    for (int s : {5, 6, 7}) f << "{\"step\": " << s << ", \"loss\": 2.0}\n";
    f << "{\"step\": 8, \"lo";  // torn by a crash
  }
  auto t = truncate_metrics(path, 6);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->lines_kept, 6);
  EXPECT_EQ(t->steps_missing, 0);
  std::ifstream in(path);
  std::string line;
  std::vector<std::pair<int64_t, double>> got;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    got.emplace_back(j["step"].get<int64_t>(), j["loss"].get<double>());
  }
  const std::vector<std::pair<int64_t, double>> want = {{1, 1.0}, {2, 1.0}, {3, 1.0},
                                                        {4, 1.0}, {5, 2.0}, {6, 2.0}};
  EXPECT_EQ(got, want);
  // A checkpoint past the last line: the gap is reported.
  t = truncate_metrics(path, 9);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->lines_kept, 6);
  EXPECT_EQ(t->steps_missing, 3);
  EXPECT_EQ(t->first_missing, 7);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace zero::runtime
