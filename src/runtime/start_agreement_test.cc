#include "runtime/start_agreement.h"

#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "comm/self_communicator.h"

namespace zero::runtime {
namespace {

TEST(StartAgreement, FlattensNestedObjectsAndKeepsArraysWhole) {
  RunFingerprint fp;
  add_to_fingerprint(fp, "ds", nlohmann::json::parse(R"({"zero_optimization": {"stage": 3},
                                               "optimizer": {"params": {"betas": [0.9, 0.95]}},
                                               "empty": {}})"));
  EXPECT_EQ(fp.at("ds.zero_optimization.stage"), "3");
  EXPECT_EQ(fp.at("ds.optimizer.params.betas"), "[0.9,0.95]");
  EXPECT_EQ(fp.at("ds.empty"), "{}");
  EXPECT_EQ(fp.size(), 3u);
}

TEST(StartAgreement, SerializationRoundTripsAndHashesDiffer) {
  RunFingerprint a{{"x.lr", "0.001"}, {"--max_steps", "4"}};
  RunFingerprint b = parse_fingerprint(serialize_fingerprint(a));
  EXPECT_EQ(a, b);
  EXPECT_EQ(fingerprint_hash(a), fingerprint_hash(b));
  b["x.lr"] = "0.002";
  EXPECT_NE(fingerprint_hash(a), fingerprint_hash(b));
}

TEST(StartAgreement, FirstDifferenceNamesTheKeyAndBothValues) {
  RunFingerprint a{{"a", "1"}, {"b", "2"}, {"c", "3"}};
  RunFingerprint b{{"a", "1"}, {"b", "5"}, {"c", "4"}};
  EXPECT_EQ(first_difference(a, 0, b, 3), "b: rank 0 has 2, rank 3 has 5");
  EXPECT_EQ(first_difference(a, 0, a, 1), "");
  RunFingerprint c{{"a", "1"}, {"b", "2"}};
  EXPECT_EQ(first_difference(a, 0, c, 1), "c: rank 0 has 3, rank 1 has (not set)");
}

TEST(StartAgreement, WorldOfOneReportsItsOwnFailureOnly) {
  SelfCommunicator comm;
  std::FILE* err = std::tmpfile();
  ASSERT_NE(err, nullptr);
  EXPECT_EQ(agree_to_start(comm, 0, "", {{"a", "1"}}, err), 0);
  EXPECT_EQ(agree_to_start(comm, 2, "--output_dir x: not a directory", {}, err), 2);
  std::rewind(err);
  char buf[256] = {};
  ASSERT_NE(std::fgets(buf, sizeof(buf), err), nullptr);
  EXPECT_STREQ(buf, "error: --output_dir x: not a directory\n");
  std::fclose(err);
  // No collective was issued for a world of one.
  EXPECT_EQ(comm.stats().total_calls(), 0);
}

}  // namespace
}  // namespace zero::runtime
