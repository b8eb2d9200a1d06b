// `zero --version` format: four lines, the backends named or "off".
#include <gtest/gtest.h>

#include "cli/commands.h"

namespace zero::cli {
namespace {

TEST(Version, FourLines) {
  std::string v = version_text();
  EXPECT_EQ(v.rfind("zero ", 0), 0u) << v;
  EXPECT_NE(v.find("\ncuda: "), std::string::npos);
  EXPECT_NE(v.find("\nnccl: "), std::string::npos);
  EXPECT_NE(v.find("\nmpi: "), std::string::npos);
  EXPECT_EQ(std::count(v.begin(), v.end(), '\n'), 4);
}

}  // namespace
}  // namespace zero::cli
