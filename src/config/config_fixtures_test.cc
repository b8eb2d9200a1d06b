// Runs every config under tests/fixtures/configs: valid/ ones (seed documents and real configs from
// public projects) must load and validate without errors, and their effective config must render
// to text that itself loads and validates; each invalid/NAME.json must produce every line of
// invalid/NAME.expect ("args: --world_size N --strict" lines set options).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "config/effective.h"
#include "config/loader.h"
#include "config/validate.h"

namespace zero::config {
namespace {

namespace fs = std::filesystem;

fs::path fixtures_dir() { return fs::path(ZERO_SOURCE_DIR) / "tests" / "fixtures" / "configs"; }

std::vector<fs::path> json_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".json") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ConfigFixtures, ValidConfigsPass) {
  auto files = json_files(fixtures_dir() / "valid");
  ASSERT_GE(files.size(), 40u);
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.string());
    auto loaded = load_ds_config_file(f.string());
    ASSERT_TRUE(loaded.ok()) << loaded.status().message();
    ValidationReport report = validate_ds_config(loaded->json, {}, &loaded->sources);
    EXPECT_TRUE(report.ok()) << report.format();
    auto eff = build_effective_config(loaded->json);
    ASSERT_TRUE(eff.ok()) << eff.status().message();
    std::string rendered = render_effective_config(*eff);
    auto again = load_ds_config_text(rendered, "rendered");
    ASSERT_TRUE(again.ok()) << again.status().message() << "\n" << rendered;
    ValidationReport report2 = validate_ds_config(again->json, {}, &again->sources);
    EXPECT_TRUE(report2.ok()) << report2.format() << rendered;
    // Rendering is a fixed point: the effective config of the effective config is itself.
    auto eff2 = build_effective_config(again->json);
    ASSERT_TRUE(eff2.ok());
    EXPECT_EQ(eff2->json, eff->json);
  }
}

TEST(ConfigFixtures, InvalidConfigsFailWithTheirPaths) {
  auto files = json_files(fixtures_dir() / "invalid");
  ASSERT_GE(files.size(), 25u);
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.string());
    fs::path expect_path = f;
    expect_path.replace_extension(".expect");
    std::ifstream expect_in(expect_path);
    ASSERT_TRUE(expect_in) << "missing " << expect_path;
    ValidateOptions options;
    std::vector<std::string> expected;
    for (std::string line; std::getline(expect_in, line);) {
      if (line.rfind("args:", 0) == 0) {
        std::istringstream args(line.substr(5));
        for (std::string a; args >> a;) {
          if (a == "--strict") options.strict = true;
          if (a == "--world_size") {
            int64_t w = 0;
            args >> w;
            options.world_size = w;
          }
        }
      } else if (!line.empty()) {
        expected.push_back(line);
      }
    }
    ASSERT_FALSE(expected.empty());
    std::string output;
    // Syntax errors name the file as given; fixtures name it relative to their folder.
    fs::path old_cwd = fs::current_path();
    fs::current_path(f.parent_path());
    auto loaded = load_ds_config_file(f.filename().string());
    fs::current_path(old_cwd);
    if (!loaded.ok()) {
      output = "error: " + loaded.status().message() + "\n";
    } else {
      ValidationReport report = validate_ds_config(loaded->json, options, &loaded->sources);
      EXPECT_FALSE(report.ok());
      output = report.format();
    }
    for (const std::string& e : expected) {
      EXPECT_NE(output.find(e), std::string::npos) << "expected: " << e << "\ngot:\n" << output;
    }
  }
}

}  // namespace
}  // namespace zero::config
