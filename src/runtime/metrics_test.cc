// metrics.jsonl lines: every key of the contract, floats that read back exactly.
#include "runtime/metrics.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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
}

}  // namespace
}  // namespace zero::runtime
