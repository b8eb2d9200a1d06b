// parse_aio_config: DeepSpeed defaults, overrides, typos, deprecated and unsupported keys.
#include "offload/aio_config.h"

#include <gtest/gtest.h>

namespace zero::offload {
namespace {

TEST(AioConfigTest, DefaultsMatchDeepSpeed) {
  for (const auto& block : {nlohmann::json(), nlohmann::json::object()}) {
    auto config = parse_aio_config(block);
    ASSERT_TRUE(config.ok());
    EXPECT_EQ(config->block_size_bytes, 1048576u);
    EXPECT_EQ(config->queue_depth, 8);
    EXPECT_EQ(config->intra_op_parallelism, 1);
    EXPECT_FALSE(config->single_submit);
    EXPECT_TRUE(config->overlap_events);
    EXPECT_FALSE(config->use_gds);
  }
}

TEST(AioConfigTest, OverridesAndRoundTrip) {
  auto block = nlohmann::json::parse(
      R"({"block_size": 262144, "queue_depth": 32, "intra_op_parallelism": 4,
          "single_submit": true, "overlap_events": false, "use_gds": false})");
  auto config = parse_aio_config(block);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_EQ(config->block_size_bytes, 262144u);
  EXPECT_EQ(config->queue_depth, 32);
  EXPECT_EQ(config->intra_op_parallelism, 4);
  EXPECT_TRUE(config->single_submit);
  EXPECT_FALSE(config->overlap_events);
  EXPECT_EQ(aio_config_to_json(*config), block);
  // 1e6-style integral floats are accepted like Python's int().
  EXPECT_EQ(
      parse_aio_config(nlohmann::json::parse(R"({"block_size": 2.097152e6})"))->block_size_bytes,
      2097152u);
}

TEST(AioConfigTest, Errors) {
  auto code = [](const char* text) {
    return parse_aio_config(nlohmann::json::parse(text)).status().code();
  };
  EXPECT_EQ(code(R"({"queue_dept": 8})"), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(R"({"block_size": 1000})"), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(R"({"block_size": 0})"), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(R"({"queue_depth": 0})"), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(R"({"intra_op_parallelism": -1})"), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(R"({"single_submit": "yes"})"), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(R"({"queue_depth": 8.5})"), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(R"([1])"), StatusCode::kInvalidArgument);
  auto gds = parse_aio_config(nlohmann::json::parse(R"({"use_gds": true})"));
  EXPECT_EQ(gds.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(gds.status().message().find("cuFile/GDS is not available in this build"),
            std::string::npos);
  // Deprecated key: ignored with a warning (DeepSpeed ignores it silently).
  auto old = parse_aio_config(nlohmann::json::parse(R"({"thread_count": 4})"));
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->intra_op_parallelism, 1);
}

}  // namespace
}  // namespace zero::offload
