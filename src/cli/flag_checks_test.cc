#include "cli/flag_checks.h"

#include <gtest/gtest.h>

namespace zero::cli {
namespace {

std::string check(const CLI::Validator& v, std::string text) { return v(text); }

TEST(FlagChecks, IntegersOutOfRangeAreNamedNotReinterpreted) {
  EXPECT_EQ(check(int_at_least(1), "4"), "");
  EXPECT_EQ(check(int_at_least(1), "0"), "must be an integer >= 1, got 0");
  EXPECT_EQ(check(int_at_least(1), "-5"), "must be an integer >= 1, got -5");
  EXPECT_EQ(check(int_at_least(0), "-1"), "must be an integer >= 0, got -1");
  EXPECT_EQ(check(int_at_least(0), "abc"), "must be an integer >= 0, got abc");
  EXPECT_EQ(check(int_at_least(0), "99999999999999999999"),
            "must be an integer >= 0, got 99999999999999999999");
  EXPECT_EQ(check(int_at_least(-1, 3), "4"), "must be an integer in [-1, 3], got 4");
}

TEST(FlagChecks, RealsMustBeFiniteAndInRange) {
  EXPECT_EQ(check(real_at_least(0), "0"), "");
  EXPECT_EQ(check(real_at_least(0), "1e-3"), "");
  EXPECT_NE(check(real_at_least(0), "-1"), "");
  EXPECT_NE(check(real_at_least(0), "nan"), "");
  EXPECT_NE(check(real_at_least(0), "inf"), "");
  EXPECT_NE(check(real_at_least(0, /*exclusive=*/true), "0"), "");
  EXPECT_NE(check(real_at_least(0, false, 1), "1.5"), "");
  EXPECT_EQ(check(real_at_least(0, false, 1), "0.95"), "");
}

TEST(FlagChecks, IdListsRejectEmptyItemsAndNonNumbers) {
  std::vector<int64_t> ids;
  EXPECT_EQ(parse_id_list("1, 2,3", 10, "--prompt_tokens", &ids), "");
  EXPECT_EQ(ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(parse_id_list("abc", 10, "--prompt_tokens", &ids),
            "--prompt_tokens abc: 'abc' is not a token id (expected ids like 1,2,3)");
  EXPECT_EQ(parse_id_list("1,,2", 10, "--prompt_tokens", &ids),
            "--prompt_tokens 1,,2: item 1 is empty (expected ids like 1,2,3)");
  EXPECT_EQ(parse_id_list("12", 10, "--prompt_tokens", &ids),
            "--prompt_tokens: id 12 is outside the vocabulary [0, 10)");
  EXPECT_NE(parse_id_list("1x", 10, "--prompt_tokens", &ids), "");
}

TEST(FlagChecks, UnknownFlagsGetTheClosestKnownFlag) {
  CLI::App app("test", "zero");
  CLI::App* train = app.add_subcommand("train");
  double lr = 0;
  int64_t steps = 0;
  train->add_option("--learning_rate", lr);
  train->add_option("--max_steps", steps);
  const char* argv[] = {"zero", "train", "--learnig_rate", "1e-3", "--frobnicate"};
  try {
    app.parse(5, const_cast<char**>(argv));
    FAIL() << "expected an ExtrasError";
  } catch (const CLI::ExtrasError& e) {
    const std::string msg = describe_unknown_flags(app, e);
    EXPECT_NE(msg.find("error: zero train: unknown flag --learnig_rate (did you mean "
                       "--learning_rate?)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("error: zero train: unknown flag --frobnicate\n"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace zero::cli
